import java.util.List;
import java.util.Map;
import offsetstore.flink.OffsetStoreSink;
import offsetstore.flink.StoreOffsetsInitializer;
import org.apache.kafka.common.TopicPartition;

/**
 * What a Flink job meets at its start, without running one: args are a JDBC URL, a user, a group,
 * Kafka's bootstrap servers and a topic. Prints the offsets initializer's starting offsets for
 * partition 0 (or its refusal), then the sink's build() (the generation it joined, or its refusal);
 * tests/flink/test_cluster_binding.py reads the lines.
 */
public final class BindingCheck {
    public static void main(String[] args) {
        String url = args[0];
        String user = args[1];
        String group = args[2];
        String bootstrap = args[3];
        String topic = args[4];
        try {
            StoreOffsetsInitializer init = StoreOffsetsInitializer.of(url, user, "", group, "FAIL", bootstrap);
            Map<TopicPartition, Long> start = init.getPartitionOffsets(List.of(new TopicPartition(topic, 0)), null);
            System.out.println("initializer: " + start.get(new TopicPartition(topic, 0)));
        } catch (RuntimeException e) {
            System.out.println("initializer refused: " + e.getMessage());
        }
        try {
            OffsetStoreSink<?> sink = OffsetStoreSink.forRows("unused", "topic", "\"partition\"", "\"offset\"")
                    .jdbcUrl(url).property("user", user).groupId(group).kafkaBootstrapServers(bootstrap).build();
            System.out.println("sink: joined " + sink.generation() + " bound to " + sink.clusterId());
        } catch (RuntimeException e) {
            System.out.println("sink refused: " + e.getMessage());
        }
    }
}
