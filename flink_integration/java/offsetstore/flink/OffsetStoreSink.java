package offsetstore.flink;

import java.io.IOException;
import java.io.Serializable;
import java.sql.PreparedStatement;
import java.sql.SQLException;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collections;
import java.util.List;
import java.util.Properties;
import java.util.UUID;
import org.apache.flink.api.connector.sink2.Sink;
import org.apache.flink.api.connector.sink2.SinkWriter;
import org.apache.flink.api.connector.sink2.WriterInitContext;
import org.apache.flink.types.Row;

/**
 * A Flink sink that writes rows and their Kafka positions in ONE PostgreSQL transaction through the
 * store's SQL API: exactly once into the table with no XA and no prepared transaction.
 *
 * <p>Each writer buffers its rows and, at every checkpoint barrier (and when its buffer is full),
 * runs one transaction: {@code offsetstore.begin_write} (the group's lock, the generation's check,
 * the stored next offsets), the rows at or above the stored offsets, {@code
 * offsetstore.commit_offsets} of what it wrote, {@code COMMIT}. Rows below the stored offsets were
 * written by an earlier attempt and are skipped, so a replay from any checkpoint, old or lost,
 * writes nothing twice.
 *
 * <p>{@link Builder#build()} joins the group: each job built is an attempt with a generation of its
 * own, which fences the writers of every earlier attempt (they fail with {@link FencedException} and
 * write nothing).
 *
 * <p>With the Kafka cluster the records come from ({@link Builder#kafkaBootstrapServers}), {@link
 * Builder#build()} binds the group to that cluster (its id from the cluster's metadata): a group
 * bound to another cluster is refused (SQLSTATE OS006, both ids named) until an operator switches
 * it. Each flush then also stores the fingerprint of each partition's last record written (read
 * back from the cluster, {@code offsetstore.commit_fingerprints}, in the flush's transaction), with
 * which {@code offsetstore groups switch} places the group exactly on another cluster.
 *
 * <p>Each Kafka partition's records must reach one writer, in order (the source chained to the sink,
 * or {@code keyBy} the topic and partition): the stored offset of a partition is the highest the
 * writer wrote + 1.
 */
public final class OffsetStoreSink<IN> implements Sink<IN> {
    private static final long serialVersionUID = 1L;

    /** Where a record came from: its Kafka topic, partition and offset. */
    public interface Positions<T> extends Serializable {
        String topic(T record);

        int partition(T record);

        long offset(T record);
    }

    /** Sets a record's values on the insert statement. */
    public interface Binder<T> extends Serializable {
        void bind(PreparedStatement statement, T record) throws SQLException;
    }

    final StoreJdbc store;
    final long generation;
    final String insertSql;
    final Positions<IN> positions;
    final Binder<IN> binder;
    final int maxBufferedRows;
    /** The cluster the records come from; null when the sink was not told (no binding, no fingerprints). */
    final KafkaCluster kafka;
    final String clusterId;

    private OffsetStoreSink(Builder<IN> b, long generation, KafkaCluster kafka, String clusterId) {
        this.store = b.store;
        this.generation = generation;
        this.insertSql = b.insertSql;
        this.positions = b.positions;
        this.binder = b.binder;
        this.maxBufferedRows = b.maxBufferedRows;
        this.kafka = kafka;
        this.clusterId = clusterId;
    }

    /** The Kafka cluster id the group is bound to by this sink; null without {@link Builder#kafkaBootstrapServers}. */
    public String clusterId() {
        return clusterId;
    }

    /** The generation this attempt joined with. */
    public long generation() {
        return generation;
    }

    @Override
    public SinkWriter<IN> createWriter(WriterInitContext context) throws IOException {
        return new OffsetStoreWriter<>(this, context.getTaskInfo().getIndexOfThisSubtask());
    }

    public static <T> Builder<T> builder() {
        return new Builder<>();
    }

    /**
     * A sink of {@link Row}s into {@code table}'s {@code columns}, field i into column i; the first
     * three fields are the record's topic (String), partition (Integer) and offset (Long), as {@link
     * KafkaRows} makes them. The form PyFlink uses.
     */
    public static Builder<Row> forRows(String table, String... columns) {
        if (columns.length < 3) {
            throw new IllegalArgumentException(
                    "offsetstore: name at least the columns of the topic, the partition and the offset");
        }
        String sql = "INSERT INTO " + table + " (" + String.join(", ", columns) + ") VALUES ("
                + String.join(", ", Collections.nCopies(columns.length, "?")) + ")";
        return new Builder<Row>().insert(sql, new RowBinder(columns.length)).positions(new RowPositions());
    }

    /** How {@link #forRows} reads a row's position: fields 0, 1 and 2. */
    static final class RowPositions implements Positions<Row> {
        private static final long serialVersionUID = 1L;

        @Override
        public String topic(Row r) {
            return (String) r.getField(0);
        }

        @Override
        public int partition(Row r) {
            return ((Number) r.getField(1)).intValue();
        }

        @Override
        public long offset(Row r) {
            return ((Number) r.getField(2)).longValue();
        }
    }

    /** How {@link #forRows} binds a row: field i to parameter i + 1. */
    static final class RowBinder implements Binder<Row> {
        private static final long serialVersionUID = 1L;
        private final int arity;

        RowBinder(int arity) {
            this.arity = arity;
        }

        @Override
        public void bind(PreparedStatement st, Row r) throws SQLException {
            if (r.getArity() != arity) {
                throw new SQLException("offsetstore: a row of " + r.getArity() + " fields for " + arity + " columns", "22023");
            }
            for (int i = 0; i < arity; i++) {
                st.setObject(i + 1, r.getField(i));
            }
        }
    }

    /** Builds the sink; {@link #build()} joins the group. */
    public static final class Builder<T> {
        private StoreJdbc store;
        private String url;
        private final Properties properties = new Properties();
        private String groupId;
        private String memberId = "flink-" + UUID.randomUUID();
        private Long generation;
        private String insertSql;
        private Positions<T> positions;
        private Binder<T> binder;
        private int maxBufferedRows = 50_000;
        private final Properties kafkaProperties = new Properties();

        public Builder<T> jdbcUrl(String url) {
            this.url = url;
            return this;
        }

        public Builder<T> property(String name, String value) {
            properties.setProperty(name, value);
            return this;
        }

        public Builder<T> groupId(String groupId) {
            this.groupId = groupId;
            return this;
        }

        /** The member id the join records (the history's and describe's); a random one by default. */
        public Builder<T> memberId(String memberId) {
            this.memberId = memberId;
            return this;
        }

        /** A generation joined elsewhere, instead of joining in {@link #build()}. */
        public Builder<T> generation(long generation) {
            this.generation = generation;
            return this;
        }

        public Builder<T> insert(String sql, Binder<T> binder) {
            this.insertSql = sql;
            this.binder = binder;
            return this;
        }

        public Builder<T> positions(Positions<T> positions) {
            this.positions = positions;
            return this;
        }

        /**
         * The Kafka cluster the records come from (the source's {@code bootstrap.servers}): {@link
         * #build()} binds the group to its id, and each flush stores the fingerprints of the last records.
         */
        public Builder<T> kafkaBootstrapServers(String servers) {
            return kafkaProperty("bootstrap.servers", servers);
        }

        /** A Kafka client property for reaching that cluster (the source's security settings: SASL, TLS). */
        public Builder<T> kafkaProperty(String name, String value) {
            kafkaProperties.setProperty(name, value);
            return this;
        }

        /** A writer flushes early when it holds this many rows (besides at every checkpoint). */
        public Builder<T> maxBufferedRows(int rows) {
            if (rows < 1) {
                throw new IllegalArgumentException("offsetstore: maxBufferedRows must be at least 1");
            }
            this.maxBufferedRows = rows;
            return this;
        }

        public OffsetStoreSink<T> build() {
            List<String> missing = new ArrayList<>();
            for (Object[] pair : Arrays.asList(
                    new Object[] {"jdbcUrl", url}, new Object[] {"groupId", groupId},
                    new Object[] {"insert", insertSql}, new Object[] {"positions", positions})) {
                if (pair[1] == null) {
                    missing.add((String) pair[0]);
                }
            }
            if (!missing.isEmpty()) {
                throw new IllegalArgumentException("offsetstore: the sink needs " + String.join(", ", missing));
            }
            FlinkVersion.check();
            store = new StoreJdbc(url, properties, groupId);
            KafkaCluster kafka = kafkaProperties.isEmpty() ? null : new KafkaCluster(kafkaProperties);
            String clusterId = kafka == null ? null : kafka.clusterId();
            long joined;
            try {
                if (generation != null) {
                    joined = generation;
                    if (clusterId != null) {
                        store.bindCluster(clusterId);
                    }
                } else {
                    joined = store.joinGroup(memberId, clusterId);
                }
            } catch (SQLException e) {
                throw new IllegalStateException(OffsetStoreWriter.describe("could not join group " + groupId, e), e);
            }
            return new OffsetStoreSink<>(this, joined, kafka, clusterId);
        }
    }
}
