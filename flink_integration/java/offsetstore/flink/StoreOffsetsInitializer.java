package offsetstore.flink;

import java.sql.SQLException;
import java.util.ArrayList;
import java.util.Collection;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import org.apache.flink.connector.kafka.source.enumerator.initializer.OffsetsInitializer;
import org.apache.kafka.clients.consumer.OffsetResetStrategy;
import org.apache.kafka.common.TopicPartition;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * {@code KafkaSource}'s starting offsets from the store: each partition starts at the group's stored
 * next offset, so a job started without a checkpoint or savepoint resumes where the table is.
 *
 * <p>A stored sentinel starts at the log's beginning (-2) or end (-1). A partition the store has no
 * offset for (a new group, a new partition) starts where the fallback says: {@link Fallback#EARLIEST}
 * by default (a new group copies the whole topic), {@link Fallback#LATEST}, or {@link Fallback#FAIL}
 * (the job does not start, naming the partitions). A stored offset below the log's start (retention
 * deleted it) starts at the log's start.
 *
 * <p>Told the Kafka cluster the source reads ({@link #of(String, String, String, String, String,
 * String)}'s bootstrap servers, or a {@code Properties} of a Kafka client), it refuses to start a group
 * bound to another cluster (its id from the cluster's metadata), naming both ids: the positions of
 * one cluster mean nothing on another (issue 58). An unbound group starts; the sink binds it.
 *
 * <p>Used only where Flink has no position of its own: a job restored from a checkpoint reads the
 * checkpoint's positions, and the sink skips whatever the store already holds.
 */
public final class StoreOffsetsInitializer implements OffsetsInitializer {
    private static final long serialVersionUID = 1L;
    private static final Logger LOG = LoggerFactory.getLogger(StoreOffsetsInitializer.class);

    /** Where a partition without a stored offset starts. */
    public enum Fallback {
        EARLIEST,
        LATEST,
        FAIL
    }

    private final StoreJdbc store;
    private final Fallback fallback;
    private final KafkaCluster kafka; // null: the cluster is not checked

    public StoreOffsetsInitializer(String jdbcUrl, Properties properties, String groupId, Fallback fallback) {
        this(jdbcUrl, properties, groupId, fallback, null);
    }

    /** With {@code kafkaProperties} (a Kafka client's, {@code bootstrap.servers} at least): the cluster is checked. */
    public StoreOffsetsInitializer(
            String jdbcUrl, Properties properties, String groupId, Fallback fallback, Properties kafkaProperties) {
        this.store = new StoreJdbc(jdbcUrl, properties, groupId);
        this.fallback = fallback == null ? Fallback.EARLIEST : fallback;
        this.kafka = kafkaProperties == null || kafkaProperties.isEmpty() ? null : new KafkaCluster(kafkaProperties);
    }

    public StoreOffsetsInitializer(String jdbcUrl, Properties properties, String groupId) {
        this(jdbcUrl, properties, groupId, Fallback.EARLIEST);
    }

    /** The form PyFlink calls: the fallback by name (EARLIEST, LATEST, FAIL). */
    public static StoreOffsetsInitializer of(String jdbcUrl, String user, String password, String groupId, String fallback) {
        Properties p = new Properties();
        if (user != null) {
            p.setProperty("user", user);
        }
        if (password != null) {
            p.setProperty("password", password);
        }
        return new StoreOffsetsInitializer(jdbcUrl, p, groupId, Fallback.valueOf(fallback.toUpperCase()));
    }

    /** As {@link #of(String, String, String, String, String)}, refusing a group bound to another cluster than {@code bootstrapServers}'. */
    public static StoreOffsetsInitializer of(
            String jdbcUrl, String user, String password, String groupId, String fallback, String bootstrapServers) {
        StoreOffsetsInitializer plain = of(jdbcUrl, user, password, groupId, fallback);
        Properties k = new Properties();
        k.setProperty("bootstrap.servers", bootstrapServers);
        return new StoreOffsetsInitializer(jdbcUrl, plain.store.properties(), groupId, plain.fallback, k);
    }

    @Override
    public Map<TopicPartition, Long> getPartitionOffsets(
            Collection<TopicPartition> partitions, PartitionOffsetsRetriever retriever) {
        FlinkVersion.check();
        Map<String, Long> stored;
        try {
            if (kafka != null) {
                String clusterId = kafka.clusterId();
                String bound = store.boundCluster();
                if (bound != null && !bound.equals(clusterId)) {
                    throw new IllegalStateException("offsetstore: group " + store.groupId() + " is bound to Kafka cluster "
                            + bound + ", and this source reads cluster " + clusterId + ": not started. Move the group"
                            + " with `offsetstore groups switch " + store.groupId() + " --to-bootstrap-server ...`,"
                            + " or read the cluster it is bound to");
                }
            }
            stored = store.readOffsets();
        } catch (SQLException e) {
            throw new IllegalStateException(
                    OffsetStoreWriter.describe("could not read the offsets or the cluster of group " + store.groupId(), e), e);
        }
        Map<TopicPartition, Long> out = new HashMap<>();
        List<TopicPartition> earliest = new ArrayList<>();
        List<TopicPartition> latest = new ArrayList<>();
        List<TopicPartition> missing = new ArrayList<>();
        for (TopicPartition tp : partitions) {
            Long next = stored.get(StoreJdbc.key(tp.topic(), tp.partition()));
            if (next == null) {
                missing.add(tp);
            } else if (next == -2L) {
                earliest.add(tp);
            } else if (next == -1L) {
                latest.add(tp);
            } else {
                out.put(tp, next);
            }
        }
        if (!missing.isEmpty()) {
            if (fallback == Fallback.FAIL) {
                throw new IllegalStateException("offsetstore: group " + store.groupId()
                        + " has no stored offset for " + missing + " and the fallback is FAIL");
            }
            LOG.info("offsetstore: group {} has no stored offset for {}: starting them at the {}",
                    store.groupId(), missing, fallback == Fallback.EARLIEST ? "log's beginning" : "log's end");
            (fallback == Fallback.EARLIEST ? earliest : latest).addAll(missing);
        }
        if (!earliest.isEmpty()) {
            out.putAll(retriever.beginningOffsets(earliest));
        }
        if (!latest.isEmpty()) {
            out.putAll(retriever.endOffsets(latest));
        }
        LOG.info("offsetstore: group {} starts at {}", store.groupId(), out);
        return out;
    }

    @Override
    public OffsetResetStrategy getAutoOffsetResetStrategy() {
        // Only for a stored offset out of the log's range: below its start (retention) is the start.
        return OffsetResetStrategy.EARLIEST;
    }
}
