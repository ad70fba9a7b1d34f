// A consumer of a Kafka-shaped input (a CSV of topic,partition,offset,value in log order)
// that writes each batch's rows and its offsets in one JDBC transaction through offsetstore's
// SQL API v1 (docs/sql.md). Killed anywhere and run again, it writes every record once.
//
//   javac -cp /usr/share/java/postgresql.jar -d out CsvConsumer.java
//   java -cp out:/usr/share/java/postgresql.jar CsvConsumer \
//       --jdbc-url jdbc:postgresql://db/app --user app --password secret \
//       --group orders-etl --table orders_copy --input records.csv [--batch 50] [--hold-ms 0]
//
// The table needs the columns topic, "partition", "offset", value, run (the generation).
// Output lines: `joined G`, `wrote N` (after each COMMIT), `fenced <DETAIL>`, `done`.
// Exit 0 when the input is written, 3 when fenced (SQLSTATE OS001).

import java.io.BufferedReader;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.sql.Array;
import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;

public final class CsvConsumer {
    static final String STALE_GENERATION = "OS001";

    record Record(String topic, int partition, long offset, String value) {}

    public static void main(String[] argv) throws Exception {
        Map<String, String> args = new HashMap<>(Map.of("--batch", "50", "--hold-ms", "0", "--password", ""));
        for (int i = 0; i + 1 < argv.length; i += 2) {
            args.put(argv[i], argv[i + 1]);
        }
        String group = args.get("--group");
        String table = args.get("--table");
        int batch = Integer.parseInt(args.get("--batch"));
        long holdMs = Long.parseLong(args.get("--hold-ms"));
        List<Record> input = read(Path.of(args.get("--input")));

        Properties props = new Properties();
        props.setProperty("user", args.get("--user"));
        props.setProperty("password", args.get("--password"));
        try (Connection db = DriverManager.getConnection(args.get("--jdbc-url"), props)) {
            long generation = join(db, group);
            System.out.println("joined " + generation);
            db.setAutoCommit(false);
            for (int start = 0; start < input.size(); start += batch) {
                List<Record> chunk = input.subList(start, Math.min(start + batch, input.size()));
                try {
                    int written = write(db, group, generation, table, chunk, holdMs);
                    System.out.println(written > 0 ? "wrote " + written : "skipped " + chunk.size());
                } catch (SQLException e) {
                    db.rollback();
                    if (STALE_GENERATION.equals(e.getSQLState())) {
                        // The DETAIL is `current generation N` (docs/sql.md).
                        String detail = e instanceof org.postgresql.util.PSQLException p && p.getServerErrorMessage() != null
                                ? p.getServerErrorMessage().getDetail() : e.getMessage();
                        System.out.println("fenced " + detail);
                        System.exit(3);
                    }
                    throw e;
                }
            }
        }
        System.out.println("done");
    }

    static long join(Connection db, String group) throws SQLException {
        try (PreparedStatement st = db.prepareStatement("SELECT offsetstore.join_group(?, ?, ?)")) {
            st.setString(1, group);
            st.setString(2, "java-" + ProcessHandle.current().pid());
            st.setString(3, java.net.InetAddress.getLoopbackAddress().getHostName());
            try (ResultSet rs = st.executeQuery()) {
                rs.next();
                return rs.getLong(1);
            }
        }
    }

    /** One transaction: begin_write, the records not delivered before, commit_offsets, COMMIT. */
    static int write(Connection db, String group, long generation, String table, List<Record> chunk, long holdMs)
            throws SQLException, InterruptedException {
        Map<String, Long> stored = new HashMap<>();
        try (PreparedStatement st = db.prepareStatement(
                "SELECT topic, partition, next_offset FROM offsetstore.begin_write(?, ?)")) {
            st.setString(1, group);
            st.setLong(2, generation);
            try (ResultSet rs = st.executeQuery()) {
                while (rs.next()) {
                    stored.put(rs.getString(1) + ":" + rs.getInt(2), rs.getLong(3));
                }
            }
        }
        List<Record> fresh = new ArrayList<>();
        for (Record r : chunk) {
            Long next = stored.get(r.topic() + ":" + r.partition());
            if (next == null || r.offset() >= next) {  // the sentinels -2 and -1 skip nothing
                fresh.add(r);
            }
        }
        if (!fresh.isEmpty()) {
            try (PreparedStatement ins = db.prepareStatement(
                    "INSERT INTO " + table + " (topic, \"partition\", \"offset\", value, run) VALUES (?, ?, ?, ?, ?)")) {
                for (Record r : fresh) {
                    ins.setString(1, r.topic());
                    ins.setInt(2, r.partition());
                    ins.setLong(3, r.offset());
                    ins.setString(4, r.value());
                    ins.setLong(5, generation);
                    ins.addBatch();
                }
                ins.executeBatch();
            }
            // Each written record's offset + 1: the largest of a partition wins.
            String[] topics = new String[fresh.size()];
            Integer[] partitions = new Integer[fresh.size()];
            Long[] next = new Long[fresh.size()];
            for (int i = 0; i < fresh.size(); i++) {
                topics[i] = fresh.get(i).topic();
                partitions[i] = fresh.get(i).partition();
                next[i] = fresh.get(i).offset() + 1;
            }
            try (PreparedStatement st = db.prepareStatement("SELECT * FROM offsetstore.commit_offsets(?, ?, ?, ?, ?)")) {
                Array t = db.createArrayOf("text", topics);
                Array p = db.createArrayOf("integer", partitions);
                Array o = db.createArrayOf("bigint", next);
                st.setString(1, group);
                st.setLong(2, generation);
                st.setArray(3, t);
                st.setArray(4, p);
                st.setArray(5, o);
                st.executeQuery().close();
            }
        }
        if (holdMs > 0) {
            Thread.sleep(holdMs);
        }
        db.commit();
        return fresh.size();
    }

    static List<Record> read(Path path) throws IOException {
        List<Record> out = new ArrayList<>();
        try (BufferedReader in = Files.newBufferedReader(path)) {
            String line = in.readLine();  // the header
            while ((line = in.readLine()) != null) {
                String[] f = line.split(",", 4);
                out.add(new Record(f[0], Integer.parseInt(f[1]), Long.parseLong(f[2]), f[3]));
            }
        }
        return out;
    }
}
