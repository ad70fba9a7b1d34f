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

    public StoreOffsetsInitializer(String jdbcUrl, Properties properties, String groupId, Fallback fallback) {
        this.store = new StoreJdbc(jdbcUrl, properties, groupId);
        this.fallback = fallback == null ? Fallback.EARLIEST : fallback;
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

    @Override
    public Map<TopicPartition, Long> getPartitionOffsets(
            Collection<TopicPartition> partitions, PartitionOffsetsRetriever retriever) {
        FlinkVersion.check();
        Map<String, Long> stored;
        try {
            stored = store.readOffsets();
        } catch (SQLException e) {
            throw new IllegalStateException(
                    OffsetStoreWriter.describe("could not read the offsets of group " + store.groupId(), e), e);
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
