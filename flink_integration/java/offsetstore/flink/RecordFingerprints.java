package offsetstore.flink;

import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;
import java.util.Arrays;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.common.header.Header;

/**
 * What identifies a Kafka record on any cluster holding a copy of it (issue 58): its timestamp and
 * the first 16 bytes of the SHA-256 of its key, value and headers, each length-prefixed as a big-endian int32
 * (-1 for null), the headers preceded by their count. The one definition is Python's
 * (kafka_integration/fingerprints.py); this is the same bytes in Java.
 */
public final class RecordFingerprints {
    /** The digest's length in bytes. */
    public static final int DIGEST_BYTES = 16;

    private RecordFingerprints() {}

    /** The 16-byte digest of {@code record}'s key, value and headers (in their order). */
    public static byte[] digest(ConsumerRecord<byte[], byte[]> record) {
        MessageDigest h = sha256();
        field(h, record.key());
        field(h, record.value());
        Header[] headers = record.headers() == null ? new Header[0] : record.headers().toArray();
        h.update(int32(headers.length));
        for (Header header : headers) {
            field(h, header.key() == null ? null : header.key().getBytes(StandardCharsets.UTF_8));
            field(h, header.value());
        }
        return Arrays.copyOf(h.digest(), DIGEST_BYTES);
    }

    /** The digest of a key, a value and no headers (the form a test compares with Python's). */
    public static byte[] digest(byte[] key, byte[] value) {
        MessageDigest h = sha256();
        field(h, key);
        field(h, value);
        h.update(int32(0));
        return Arrays.copyOf(h.digest(), DIGEST_BYTES);
    }

    private static MessageDigest sha256() {
        try {
            return MessageDigest.getInstance("SHA-256"); // every JDK has it (the Java Security Standard Algorithm Names)
        } catch (NoSuchAlgorithmException e) {
            throw new IllegalStateException("this JDK has no SHA-256", e);
        }
    }

    private static void field(MessageDigest h, byte[] data) {
        if (data == null) {
            h.update(int32(-1));
            return;
        }
        h.update(int32(data.length));
        h.update(data);
    }

    private static byte[] int32(int n) {
        return ByteBuffer.allocate(4).putInt(n).array(); // big-endian, as Python's to_bytes(4, "big")
    }
}
