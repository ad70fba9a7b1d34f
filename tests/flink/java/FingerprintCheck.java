import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.util.HexFormat;
import offsetstore.flink.RecordFingerprints;
import org.apache.kafka.clients.consumer.ConsumerRecord;

/**
 * Prints the sink's digest of each record read from stdin, one a line: key, value and then
 * headers (name, value) pairs, tab-separated, each field hex or "-" for null; a header's name is
 * hex of its UTF-8. tests/flink/test_fingerprints.py compares the output with Python's digest.
 */
public final class FingerprintCheck {
    public static void main(String[] args) throws Exception {
        HexFormat hex = HexFormat.of();
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        for (String line; (line = in.readLine()) != null; ) {
            String[] f = line.split("\t", -1);
            ConsumerRecord<byte[], byte[]> r = new ConsumerRecord<>("t", 0, 0L, bytes(hex, f[0]), bytes(hex, f[1]));
            for (int i = 2; i + 1 < f.length; i += 2) {
                r.headers().add(new String(bytes(hex, f[i]), StandardCharsets.UTF_8), bytes(hex, f[i + 1]));
            }
            System.out.println(hex.formatHex(RecordFingerprints.digest(r)));
        }
    }

    private static byte[] bytes(HexFormat hex, String field) {
        return field.equals("-") ? null : hex.parseHex(field);
    }
}
