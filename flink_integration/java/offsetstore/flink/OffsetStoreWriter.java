package offsetstore.flink;

import java.io.IOException;
import java.sql.Array;
import java.sql.Connection;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import org.apache.flink.api.connector.sink2.SinkWriter;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.common.TopicPartition;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * One subtask's writer: buffers rows, and writes them with their positions in one transaction at
 * each flush (a checkpoint barrier, end of input, a full buffer). The buffer is dropped only once
 * the transaction committed; a failed flush fails the task and Flink replays from its checkpoint.
 */
final class OffsetStoreWriter<IN> implements SinkWriter<IN> {
    private static final Logger LOG = LoggerFactory.getLogger(OffsetStoreWriter.class);

    private final OffsetStoreSink<IN> sink;
    private final int subtask;
    private final List<IN> buffer = new ArrayList<>();
    private Connection conn;
    private final KafkaCluster kafka; // null: the sink binds nothing and stores no fingerprints

    OffsetStoreWriter(OffsetStoreSink<IN> sink, int subtask) {
        this.sink = sink;
        this.subtask = subtask;
        this.kafka = sink.kafka == null ? null : sink.kafka.copy();
    }

    @Override
    public void write(IN element, Context context) throws IOException {
        buffer.add(element);
        if (buffer.size() >= sink.maxBufferedRows) {
            flush(false);
        }
    }

    @Override
    public void flush(boolean endOfInput) throws IOException {
        if (buffer.isEmpty()) {
            return;
        }
        String group = sink.store.groupId();
        try {
            if (conn == null || conn.isClosed()) {
                conn = sink.store.connect();
            }
            int[] counts = writeOnce(lastRecords());
            conn.commit();
            LOG.info("offsetstore: flushed {} rows to group {} (generation {}, subtask {}, {} skipped as written before)",
                    counts[0], group, sink.generation, subtask, counts[1]);
            buffer.clear();
        } catch (SQLException e) {
            closeQuietly();
            if ("OS001".equals(e.getSQLState())) {
                String line = describe("group " + group + " fenced generation " + sink.generation
                        + ": another attempt of the job joined or an operator reset the group;"
                        + " nothing of this flush was written; start the job again (without its checkpoint after a reset)", e);
                LOG.error(line);
                throw new FencedException(line, e);
            }
            String line = describe("flush of " + buffer.size() + " rows to group " + group + " failed;"
                    + " nothing of it was written; Flink replays from its last checkpoint and the store skips what was written", e);
            LOG.warn(line); // one line here: Flink's own report of the task's failure is a stack trace
            throw new IOException(line, e);
        }
    }

    /**
     * Each partition's last record in the buffer, read back from the Kafka cluster (before the
     * transaction: the group's lock is not held across a fetch). Empty without a cluster, or when
     * the read fails: the flush goes on without fingerprints (a switch then says so, and falls back).
     */
    private Map<String, ConsumerRecord<byte[], byte[]>> lastRecords() {
        Map<String, ConsumerRecord<byte[], byte[]>> out = new HashMap<>();
        if (kafka == null) {
            return out;
        }
        Map<TopicPartition, Long> last = new HashMap<>();
        for (IN record : buffer) {
            last.merge(new TopicPartition(sink.positions.topic(record), sink.positions.partition(record)),
                    sink.positions.offset(record), Math::max);
        }
        try {
            for (ConsumerRecord<byte[], byte[]> r : kafka.read(last).values()) {
                out.put(StoreJdbc.key(r.topic(), r.partition()), r);
            }
        } catch (RuntimeException e) {
            LOG.warn("offsetstore: could not read the last records of group {} from Kafka ({}): this flush stores"
                    + " no fingerprints", sink.store.groupId(), String.valueOf(e));
        }
        return out;
    }

    /** One transaction's statements; returns {rows written, rows skipped}. */
    private int[] writeOnce(Map<String, ConsumerRecord<byte[], byte[]>> last) throws SQLException {
        Map<String, Long> stored = new HashMap<>();
        try (PreparedStatement st = conn.prepareStatement(
                "SELECT topic, \"partition\", next_offset FROM offsetstore.begin_write(?, ?)")) {
            st.setString(1, sink.store.groupId());
            st.setLong(2, sink.generation);
            try (ResultSet rs = st.executeQuery()) {
                while (rs.next()) {
                    stored.put(StoreJdbc.key(rs.getString(1), rs.getInt(2)), rs.getLong(3));
                }
            }
        }
        Map<String, long[]> next = new HashMap<>(); // key -> {partition, next offset}
        Map<String, String> topics = new HashMap<>();
        int written = 0;
        int skipped = 0;
        try (PreparedStatement insert = conn.prepareStatement(sink.insertSql)) {
            for (IN record : buffer) {
                String topic = sink.positions.topic(record);
                int partition = sink.positions.partition(record);
                long offset = sink.positions.offset(record);
                String key = StoreJdbc.key(topic, partition);
                Long from = stored.get(key);
                if (from != null && from >= 0 && offset < from) {
                    skipped++;
                    continue;
                }
                sink.binder.bind(insert, record);
                insert.addBatch();
                written++;
                long[] seen = next.computeIfAbsent(key, k -> new long[] {partition, -1});
                seen[1] = Math.max(seen[1], offset + 1);
                topics.put(key, topic);
            }
            if (written > 0) {
                insert.executeBatch();
            }
        }
        if (!next.isEmpty()) {
            int n = next.size();
            String[] ts = new String[n];
            Integer[] ps = new Integer[n];
            Long[] os = new Long[n];
            int i = 0;
            for (Map.Entry<String, long[]> e : next.entrySet()) {
                ts[i] = topics.get(e.getKey());
                ps[i] = (int) e.getValue()[0];
                os[i] = e.getValue()[1];
                i++;
            }
            try (PreparedStatement st = conn.prepareStatement(
                    "SELECT count(*) FROM offsetstore.commit_offsets(?, ?, ?, ?, ?)")) {
                st.setString(1, sink.store.groupId());
                st.setLong(2, sink.generation);
                Array a = conn.createArrayOf("text", ts);
                Array b = conn.createArrayOf("integer", ps);
                Array c = conn.createArrayOf("bigint", os);
                st.setArray(3, a);
                st.setArray(4, b);
                st.setArray(5, c);
                st.executeQuery().close();
            }
            commitFingerprints(next, topics, last);
        }
        return new int[] {written, skipped};
    }

    /** The fingerprints of the records before the offsets just committed, where the record was read. */
    private void commitFingerprints(
            Map<String, long[]> next, Map<String, String> topics, Map<String, ConsumerRecord<byte[], byte[]>> last)
            throws SQLException {
        List<String> ts = new ArrayList<>();
        List<Integer> ps = new ArrayList<>();
        List<Long> os = new ArrayList<>();
        List<Long> times = new ArrayList<>();
        List<byte[]> digests = new ArrayList<>();
        for (Map.Entry<String, long[]> e : next.entrySet()) {
            ConsumerRecord<byte[], byte[]> r = last.get(e.getKey());
            if (r == null || r.offset() + 1 != e.getValue()[1]) {
                continue;
            }
            ts.add(topics.get(e.getKey()));
            ps.add((int) e.getValue()[0]);
            os.add(e.getValue()[1]);
            times.add(r.timestamp());
            digests.add(RecordFingerprints.digest(r));
        }
        if (ts.isEmpty()) {
            return;
        }
        try (PreparedStatement st =
                conn.prepareStatement("SELECT offsetstore.commit_fingerprints(?, ?, ?, ?, ?, ?, ?)")) {
            st.setString(1, sink.store.groupId());
            st.setLong(2, sink.generation);
            st.setArray(3, conn.createArrayOf("text", ts.toArray(new String[0])));
            st.setArray(4, conn.createArrayOf("integer", ps.toArray(new Integer[0])));
            st.setArray(5, conn.createArrayOf("bigint", os.toArray(new Long[0])));
            st.setArray(6, conn.createArrayOf("bigint", times.toArray(new Long[0])));
            st.setArray(7, conn.createArrayOf("bytea", digests.toArray(new byte[0][])));
            st.executeQuery().close();
        }
    }

    /** One line naming the cause: the SQLSTATE and the first line of the driver's message. */
    static String describe(String what, SQLException e) {
        SQLException first = e;
        if (e.getNextException() != null) {
            first = e.getNextException(); // a batch's failure carries the statement's own error
        }
        String message = String.valueOf(first.getMessage()).split("\n", 2)[0];
        return "offsetstore: " + what + " (SQLSTATE " + first.getSQLState() + ": " + message + ")";
    }

    private void closeQuietly() {
        if (conn != null) {
            try {
                conn.rollback();
            } catch (SQLException ignored) {
                // the connection may be gone already; closing is all that is left
            }
            try {
                conn.close();
            } catch (SQLException ignored) {
                // as above
            }
            conn = null;
        }
    }

    @Override
    public void close() {
        closeQuietly();
        if (kafka != null) {
            kafka.close();
        }
    }
}
