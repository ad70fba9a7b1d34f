import java.util.HashMap;
import java.util.Map;
import offsetstore.flink.KafkaRows;
import offsetstore.flink.OffsetStoreSink;
import offsetstore.flink.StoreOffsetsInitializer;
import org.apache.flink.api.common.eventtime.WatermarkStrategy;
import org.apache.flink.api.common.functions.RichMapFunction;
import org.apache.flink.api.common.state.CheckpointListener;
import org.apache.flink.api.common.typeinfo.TypeInformation;
import org.apache.flink.api.common.typeinfo.Types;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.connector.jdbc.JdbcConnectionOptions;
import org.apache.flink.connector.jdbc.JdbcExactlyOnceOptions;
import org.apache.flink.connector.jdbc.JdbcExecutionOptions;
import org.apache.flink.connector.jdbc.JdbcStatementBuilder;
import org.apache.flink.connector.jdbc.core.datastream.sink.JdbcSink;
import org.apache.flink.connector.kafka.source.KafkaSource;
import org.apache.flink.connector.kafka.source.KafkaSourceBuilder;
import org.apache.flink.connector.kafka.source.enumerator.initializer.OffsetsInitializer;
import org.apache.flink.runtime.state.FunctionInitializationContext;
import org.apache.flink.runtime.state.FunctionSnapshotContext;
import org.apache.flink.streaming.api.checkpoint.CheckpointedFunction;
import org.apache.flink.streaming.api.datastream.DataStream;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;
import org.apache.flink.types.Row;
import org.apache.flink.util.ExceptionUtils;
import org.postgresql.xa.PGXADataSource;

/**
 * Copies a Kafka topic into a PostgreSQL table (topic, partition, offset, value, run) with Flink,
 * through the offsetstore sink (exactly once), or Flink's own JDBC sink at least once (--sink jdbc)
 * or with XA (--sink xa), for comparison.
 *
 * <p>Runs in a local MiniCluster (a plain {@code java} main) or on a cluster ({@code flink run}).
 * Prints {@code holding checkpoint N} when a checkpoint's barrier passed (the sink has flushed), and
 * {@code checkpoint N complete} when Flink completed it; {@code --hold-ms} keeps each checkpoint
 * open that long between the two, the window where a kill leaves the store ahead of the checkpoint.
 */
public final class CopyTopicJob {
    private static final TypeInformation<Row> OUT = Types.ROW(Types.STRING, Types.INT, Types.LONG, Types.STRING, Types.LONG);

    public static void main(String[] argv) throws Exception {
        Map<String, String> a = new HashMap<>(Map.of(
                "--sink", "offsetstore", "--interval-ms", "500", "--parallelism", "2", "--rate", "0",
                "--hold-ms", "0", "--run", "1", "--user", "postgres", "--password", "", "--fallback", "EARLIEST"));
        for (int i = 0; i + 1 < argv.length; i += 2) {
            a.put(argv[i], argv[i + 1]);
        }
        Map<String, String> conf = new HashMap<>();
        conf.put("execution.checkpointing.interval", a.get("--interval-ms") + " ms");
        conf.put("execution.checkpointing.externalized-checkpoint-retention", "RETAIN_ON_CANCELLATION");
        conf.put("execution.checkpointing.num-retained", "1000");
        conf.put("restart-strategy.type", "fixed-delay");
        conf.put("restart-strategy.fixed-delay.attempts", a.getOrDefault("--restarts", "3"));
        conf.put("restart-strategy.fixed-delay.delay", "500 ms");
        if (a.containsKey("--checkpoint-dir")) {
            conf.put("execution.checkpointing.dir", "file://" + a.get("--checkpoint-dir"));
        }
        if (a.containsKey("--restore")) {
            conf.put("execution.state-recovery.path", a.get("--restore"));
        }
        StreamExecutionEnvironment env = StreamExecutionEnvironment.getExecutionEnvironment(Configuration.fromMap(conf));
        env.setParallelism(Integer.parseInt(a.get("--parallelism")));

        String sink = a.get("--sink");
        String url = a.get("--jdbc-url");
        String group = a.get("--group");
        KafkaSourceBuilder<Row> source = KafkaSource.<Row>builder()
                .setBootstrapServers(a.get("--bootstrap"))
                .setTopics(a.get("--topic"))
                .setGroupId(group)
                // --commit-to-kafka yes: Flink's default, the offsets committed to the group on each checkpoint (what
                // offsetstore's --observe-kafka-groups watches); off otherwise, the store holding the positions.
                .setProperty("commit.offsets.on.checkpoint", String.valueOf(a.containsKey("--commit-to-kafka")))
                .setDeserializer(new KafkaRows());
        if (a.containsKey("--isolation-level")) {
            source.setProperty("isolation.level", a.get("--isolation-level")); // read_committed: no aborted record
        }
        if (sink.equals("offsetstore")) {
            // With the bootstrap servers, a group bound to another Kafka cluster does not start (docs/switch.md).
            source.setStartingOffsets(StoreOffsetsInitializer.of(
                    url, a.get("--user"), a.get("--password"), group, a.get("--fallback"), a.get("--bootstrap")));
        } else {
            source.setStartingOffsets(OffsetsInitializer.earliest());
        }
        if (a.containsKey("--bounded")) {
            source.setBounded(OffsetsInitializer.latest());
        }
        DataStream<Row> rows = env.fromSource(source.build(), WatermarkStrategy.noWatermarks(), "kafka")
                .uid("kafka-source")
                .map(new Tag(Long.parseLong(a.get("--run")), Double.parseDouble(a.get("--rate")), Long.parseLong(a.get("--hold-ms"))))
                .returns(OUT)
                .uid("tag");

        String table = a.get("--table");
        String[] columns = {"topic", "\"partition\"", "\"offset\"", "value", "run"};
        if (sink.equals("offsetstore")) {
            rows.sinkTo(OffsetStoreSink.forRows(table, columns)
                            .jdbcUrl(url).property("user", a.get("--user")).property("password", a.get("--password"))
                            .property("reWriteBatchedInserts", "true")
                            .kafkaBootstrapServers(a.get("--bootstrap"))  // binds the group, stores fingerprints
                            .groupId(group).memberId("copy-topic-run-" + a.get("--run")).build())
                    .uid("sink");
        } else {
            String sql = "INSERT INTO " + table + " (" + String.join(", ", columns) + ") VALUES (?, ?, ?, ?, ?)";
            JdbcStatementBuilder<Row> bind = (st, r) -> {
                for (int i = 0; i < 5; i++) {
                    st.setObject(i + 1, r.getField(i));
                }
            };
            JdbcSink<Row> jdbc;
            if (sink.equals("jdbc")) {
                jdbc = JdbcSink.<Row>builder().withQueryStatement(sql, bind)
                        .withExecutionOptions(JdbcExecutionOptions.builder().withBatchSize(5000).withBatchIntervalMs(200).build())
                        .buildAtLeastOnce(new JdbcConnectionOptions.JdbcConnectionOptionsBuilder()
                                .withUrl(url + (url.contains("?") ? "&" : "?") + "reWriteBatchedInserts=true")
                                .withDriverName("org.postgresql.Driver")
                                .withUsername(a.get("--user")).withPassword(a.get("--password")).build());
            } else if (sink.equals("xa")) {
                String user = a.get("--user");
                jdbc = JdbcSink.<Row>builder().withQueryStatement(sql, bind)
                        .withExecutionOptions(JdbcExecutionOptions.builder().withBatchSize(1000).withMaxRetries(0).build())
                        .buildExactlyOnce(JdbcExactlyOnceOptions.builder().withTransactionPerConnection(true).build(), () -> {
                            PGXADataSource ds = new PGXADataSource();
                            ds.setUrl(url);
                            ds.setUser(user);
                            return ds;
                        });
            } else {
                throw new IllegalArgumentException("--sink is offsetstore, jdbc or xa, not " + sink);
            }
            rows.sinkTo(jdbc).uid("sink");
        }
        try {
            env.execute("copy " + a.get("--topic") + " to " + table);
        } catch (Exception e) {
            Throwable root = ExceptionUtils.findThrowableWithMessage(e, "offsetstore:").orElse(ExceptionUtils.stripExecutionException(e));
            while (root.getCause() != null && !String.valueOf(root.getMessage()).startsWith("offsetstore:")) {
                root = root.getCause();
            }
            System.out.println("failed: " + root.getClass().getName() + ": " + String.valueOf(root.getMessage()).split("\n", 2)[0]);
            System.out.flush();
            System.exit(2);
        }
        System.out.println("done");
        System.out.flush();
        System.exit(0);
    }

    /** Adds the run's number; reports checkpoints; holds each one open --hold-ms; throttles to --rate records/s. */
    static final class Tag extends RichMapFunction<Row, Row> implements CheckpointedFunction, CheckpointListener {
        private final long run;
        private final double rate;
        private final long holdMs;
        private transient long started;
        private transient long seen;

        Tag(long run, double rate, long holdMs) {
            this.run = run;
            this.rate = rate;
            this.holdMs = holdMs;
        }

        @Override
        public Row map(Row r) throws Exception {
            if (seen++ == 0) {
                started = System.nanoTime(); // the first record: the source may take seconds to start
            }
            if (rate > 0 && seen % 50 == 0) {
                long due = started + (long) (seen / rate * 1e9);
                long wait = due - System.nanoTime();
                if (wait > 0) {
                    Thread.sleep(wait / 1_000_000, (int) (wait % 1_000_000));
                }
            }
            return Row.of(r.getField(0), r.getField(1), r.getField(2), r.getField(4), run);
        }

        @Override
        public void snapshotState(FunctionSnapshotContext context) throws Exception {
            System.out.println("holding checkpoint " + context.getCheckpointId());
            System.out.flush();
            if (holdMs > 0) {
                Thread.sleep(holdMs);
            }
        }

        @Override
        public void initializeState(FunctionInitializationContext context) {}

        @Override
        public void notifyCheckpointComplete(long checkpointId) {
            System.out.println("checkpoint " + checkpointId + " complete");
            System.out.flush();
        }
    }
}
