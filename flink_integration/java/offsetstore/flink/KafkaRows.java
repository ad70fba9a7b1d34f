package offsetstore.flink;

import java.nio.charset.StandardCharsets;
import org.apache.flink.api.common.typeinfo.TypeInformation;
import org.apache.flink.api.common.typeinfo.Types;
import org.apache.flink.connector.kafka.source.reader.deserializer.KafkaRecordDeserializationSchema;
import org.apache.flink.types.Row;
import org.apache.flink.util.Collector;
import org.apache.kafka.clients.consumer.ConsumerRecord;

/**
 * A Kafka record as a {@link Row} of (topic, partition, offset, key, value), key and value as UTF-8
 * text: the positions travel with the record, as {@link OffsetStoreSink#forRows} reads them.
 */
public final class KafkaRows implements KafkaRecordDeserializationSchema<Row> {
    private static final long serialVersionUID = 1L;

    public static final TypeInformation<Row> TYPE = Types.ROW_NAMED(
            new String[] {"topic", "partition", "offset", "key", "value"},
            Types.STRING, Types.INT, Types.LONG, Types.STRING, Types.STRING);

    @Override
    public void deserialize(ConsumerRecord<byte[], byte[]> record, Collector<Row> out) {
        out.collect(Row.of(record.topic(), record.partition(), record.offset(), text(record.key()), text(record.value())));
    }

    private static String text(byte[] bytes) {
        return bytes == null ? null : new String(bytes, StandardCharsets.UTF_8);
    }

    @Override
    public TypeInformation<Row> getProducedType() {
        return TYPE;
    }
}
