package offsetstore.flink;

import java.io.Serializable;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;

/**
 * The Kafka cluster a job reads (issue 58): its id, from the cluster's metadata (Admin's {@code
 * describeCluster}), which binds the group, and the records the sink fingerprints, read back from it
 * at a flush (one fetch of the last record of each partition flushed), so the job's records need
 * not carry their key, value and headers to the sink.
 *
 * <p>The properties are a Kafka client's: {@code bootstrap.servers} and whatever security the
 * source's consumer has (SASL, TLS); the reader adds its own deserializers and never commits.
 */
final class KafkaCluster implements Serializable {
    private static final long serialVersionUID = 1L;
    private static final Duration TIMEOUT = Duration.ofSeconds(30);

    private final Properties properties;
    private transient KafkaConsumer<byte[], byte[]> reader;

    KafkaCluster(Properties properties) {
        if (properties.getProperty("bootstrap.servers", "").isEmpty()) {
            throw new IllegalArgumentException("offsetstore: the Kafka cluster needs bootstrap.servers");
        }
        this.properties = new Properties();
        this.properties.putAll(properties);
    }

    /** A copy with a reader of its own (each writer reads with its own consumer). */
    KafkaCluster copy() {
        return new KafkaCluster(properties);
    }

    /** The cluster's id, from its metadata. */
    String clusterId() {
        try (Admin admin = Admin.create(properties)) {
            String id = admin.describeCluster().clusterId().get(TIMEOUT.toMillis(), TimeUnit.MILLISECONDS);
            if (id == null || id.isEmpty()) {
                throw new IllegalStateException("offsetstore: the Kafka cluster at "
                        + properties.getProperty("bootstrap.servers") + " has no cluster id (a ZooKeeper cluster "
                        + "before Kafka 0.10.1?)");
            }
            return id;
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new IllegalStateException("offsetstore: interrupted while reading the Kafka cluster's id", e);
        } catch (ExecutionException | TimeoutException e) {
            throw new IllegalStateException("offsetstore: could not read the Kafka cluster id at "
                    + properties.getProperty("bootstrap.servers") + ": " + e, e);
        }
    }

    /**
     * The records at {@code offsets} (each partition's last record flushed), as far as the cluster
     * still holds them: a record deleted or compacted away meanwhile is left out (its partition gets
     * no fingerprint; the switch says so and falls back).
     */
    Map<TopicPartition, ConsumerRecord<byte[], byte[]>> read(Map<TopicPartition, Long> offsets) {
        if (reader == null) {
            Properties p = new Properties();
            p.putAll(properties);
            p.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
            p.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
            p.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
            p.remove(ConsumerConfig.GROUP_ID_CONFIG); // no group: assign and seek only, nothing committed
            // The record the source read is in the log whatever its transaction's outcome.
            p.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, "read_uncommitted");
            p.put(ConsumerConfig.MAX_POLL_RECORDS_CONFIG, "500");
            p.put(ConsumerConfig.MAX_PARTITION_FETCH_BYTES_CONFIG, "65536"); // one record is wanted, not a batch
            reader = new KafkaConsumer<>(p);
        }
        Map<TopicPartition, ConsumerRecord<byte[], byte[]>> found = new HashMap<>();
        Set<TopicPartition> wanted = new HashSet<>(offsets.keySet());
        reader.assign(wanted);
        for (Map.Entry<TopicPartition, Long> e : offsets.entrySet()) {
            reader.seek(e.getKey(), e.getValue());
        }
        long deadline = System.nanoTime() + TIMEOUT.toNanos();
        while (!wanted.isEmpty() && System.nanoTime() < deadline) {
            for (ConsumerRecord<byte[], byte[]> r : reader.poll(Duration.ofMillis(200))) {
                TopicPartition tp = new TopicPartition(r.topic(), r.partition());
                if (!wanted.contains(tp)) {
                    continue;
                }
                if (r.offset() == offsets.get(tp)) {
                    found.put(tp, r);
                }
                if (r.offset() >= offsets.get(tp)) {
                    wanted.remove(tp); // found, or gone (compacted): either way done
                }
            }
            List<TopicPartition> done = new ArrayList<>();
            for (TopicPartition tp : wanted) {
                if (reader.position(tp) > offsets.get(tp)) {
                    done.add(tp); // past it without a record at it: gone
                }
            }
            wanted.removeAll(done);
            Collection<TopicPartition> paused = new ArrayList<>(found.keySet());
            paused.retainAll(reader.assignment());
            reader.pause(paused);
        }
        reader.resume(reader.assignment());
        return found;
    }

    void close() {
        if (reader != null) {
            reader.close();
            reader = null;
        }
    }
}
