package offsetstore.flink;

import org.apache.flink.runtime.util.EnvironmentInformation;

/** The Flink this code was built for, checked where a job is built: a mismatch is one clear line, not a linkage error. */
final class FlinkVersion {
    /** Flink's version the sink and the initializer are compiled against (with flink-connector-kafka 5.0.0-2.2). */
    static final String BUILT_FOR = "2.2";

    private FlinkVersion() {}

    static void check() {
        String running = EnvironmentInformation.getVersion();
        if (running == null || !(running.equals(BUILT_FOR) || running.startsWith(BUILT_FOR + "."))) {
            throw new IllegalStateException("offsetstore: the Flink integration is built for Flink " + BUILT_FOR
                    + ".x with flink-connector-kafka 5.0.0-2.2; this runtime is Flink " + running
                    + ": run the job on Flink " + BUILT_FOR + ".x (PyFlink: pip install apache-flink==" + BUILT_FOR + ".0)");
        }
    }
}
