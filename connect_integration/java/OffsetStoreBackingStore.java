package offsetstore.connect;

import java.nio.ByteBuffer;
import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.util.ArrayList;
import java.util.Collection;
import java.util.HashMap;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.TreeMap;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;

import org.apache.kafka.connect.errors.ConnectException;
import org.apache.kafka.connect.runtime.WorkerConfig;
import org.apache.kafka.connect.storage.OffsetBackingStore;
import org.apache.kafka.connect.util.Callback;

/**
 * Kafka Connect's OffsetBackingStore on offsetstore, through the SQL API v1 over JDBC (docs/connect.md).
 *
 * <p>Each source partition of a connector is one (topic, partition 0) of the group named for the
 * connector; its row's offset is an LSN-like position and its metadata the position map, kept whole
 * as JSON: {"partition": {...}, "offset": {...}, "next": N}.
 *
 * <p>Two modes ({@code offset.storage.offsetstore.mode}):
 * <ul>
 * <li>{@code handler} (default): the change handler commits each position in the same PostgreSQL
 * transaction as the change rows (offsetstore.connect_integration). This store only reads: what
 * the engine flushes is not written ({@link #set} completes at once), so a position is never ahead
 * of the rows. The engine resumes after the last transaction delivered; after an operator's reset
 * (the metadata's "next" no longer matches the stored offset) it resumes from the oldest change
 * its replication slot holds, and the handler writes the transactions committed at or after the
 * offset.</li>
 * <li>{@code engine}: the store joins the group at start (fencing an older engine of the same name)
 * and commits each flush with that generation (begin_write + commit_offsets): at-least-once, as the
 * file store is, plus history, fencing and live resets. The SQL API v1 stores no metadata, so in
 * this mode the map is not kept: the offset is {@code offset.storage.offsetstore.offset.key} + 1.</li>
 * </ul>
 */
public class OffsetStoreBackingStore implements OffsetBackingStore {
    public static final String PREFIX = "offset.storage.offsetstore.";
    private static final ObjectMapper JSON = new ObjectMapper();

    private String url;
    private Properties jdbcProperties = new Properties();
    private String group;
    private String mode = "handler";
    private String offsetKey = "lsn_commit";
    private Connection connection;
    private long generation;
    private ExecutorService executor;
    private Map<String, Object> engineConfig = new HashMap<>();

    @Override
    public void configure(WorkerConfig config) {
        Map<String, Object> all = config.originals();
        engineConfig = new HashMap<>(all);
        url = string(all, PREFIX + "url", null);
        if (url == null) {
            throw new ConnectException(PREFIX + "url is required (jdbc:postgresql://host:port/database)");
        }
        String user = string(all, PREFIX + "user", null);
        if (user != null) {
            jdbcProperties.setProperty("user", user);
        }
        String password = string(all, PREFIX + "password", null);
        if (password != null) {
            jdbcProperties.setProperty("password", password);
        }
        group = string(all, PREFIX + "group", string(all, "name", null));
        if (group == null || group.isEmpty()) {
            throw new ConnectException(PREFIX + "group (default: the engine's name) must not be empty");
        }
        mode = string(all, PREFIX + "mode", "handler");
        if (!mode.equals("handler") && !mode.equals("engine")) {
            throw new ConnectException(PREFIX + "mode must be 'handler' or 'engine', not '" + mode + "'");
        }
        offsetKey = string(all, PREFIX + "offset.key", "lsn_commit");
    }

    private static String string(Map<String, Object> all, String key, String fallback) {
        Object value = all.get(key);
        return value == null ? fallback : value.toString();
    }

    @Override
    public synchronized void start() {
        executor = Executors.newSingleThreadExecutor(r -> {
            Thread t = new Thread(r, "offsetstore-offset-store");
            t.setDaemon(true);
            return t;
        });
        if (mode.equals("engine")) {
            try {
                generation = join();
            } catch (SQLException e) {
                throw new ConnectException("could not join group " + group + " in offsetstore", e);
            }
        }
    }

    @Override
    public synchronized void stop() {
        if (executor != null) {
            executor.shutdown();
        }
        closeConnection();
    }

    private synchronized Connection connection() throws SQLException {
        if (connection == null || connection.isClosed()) {
            connection = DriverManager.getConnection(url, jdbcProperties);
            connection.setAutoCommit(true);
        }
        return connection;
    }

    private synchronized void closeConnection() {
        if (connection != null) {
            try {
                connection.close();
            } catch (SQLException ignored) {
                // closing a broken connection
            }
            connection = null;
        }
    }

    private long join() throws SQLException {
        try (PreparedStatement st = connection().prepareStatement("SELECT offsetstore.join_group(?, ?, ?)")) {
            st.setString(1, group);
            st.setString(2, "connect:" + ProcessHandle.current().pid());
            st.setString(3, java.net.InetAddress.getLoopbackAddress().getHostName());
            try (ResultSet rs = st.executeQuery()) {
                rs.next();
                return rs.getLong(1);
            }
        }
    }

    /** The topic naming a source partition: its values by key, joined with '.', other characters as '_'. */
    public static String topicOf(Map<String, ?> partition) {
        List<String> values = new ArrayList<>();
        for (Object v : new TreeMap<String, Object>(partition).values()) {
            values.add(String.valueOf(v));
        }
        String name = String.join(".", values).replaceAll("[^A-Za-z0-9._-]", "_");
        if (name.isEmpty()) {
            name = "_";
        }
        return name.length() > 249 ? name.substring(0, 249) : name;
    }

    /** The stored rows of the group: topic to (offset, metadata). */
    private Map<String, Object[]> readGroup() throws SQLException {
        Map<String, Object[]> rows = new HashMap<>();
        try (PreparedStatement st = connection().prepareStatement(
                "SELECT topic, next_offset, metadata FROM offsetstore.read_offsets(?) WHERE \"partition\" = 0")) {
            st.setString(1, group);
            try (ResultSet rs = st.executeQuery()) {
                while (rs.next()) {
                    rows.put(rs.getString(1), new Object[] {rs.getLong(2), rs.getString(3)});
                }
            }
        }
        return rows;
    }

    @Override
    public Future<Map<ByteBuffer, ByteBuffer>> get(Collection<ByteBuffer> keys) {
        return CompletableFuture.supplyAsync(() -> {
            try {
                Map<String, Object[]> rows = readGroup();
                Map<ByteBuffer, ByteBuffer> result = new HashMap<>();
                for (ByteBuffer key : keys) {
                    Map<String, Object> partition = partitionOf(key);
                    Object[] row = partition == null ? null : rows.get(topicOf(partition));
                    ObjectNode position = row == null ? null : position((Long) row[0], (String) row[1]);
                    result.put(key, position == null ? null : ByteBuffer.wrap(JSON.writeValueAsBytes(position)));
                }
                return result;
            } catch (Exception e) {
                closeConnection();
                throw new ConnectException("could not read the positions of group " + group + " from offsetstore", e);
            }
        }, executor);
    }

    /** The key's source partition: a key is [connector name, {partition}] as JSON. */
    @SuppressWarnings("unchecked")
    private static Map<String, Object> partitionOf(ByteBuffer key) throws java.io.IOException {
        if (key == null) {
            return null;
        }
        JsonNode node = JSON.readTree(bytes(key));
        if (!node.isArray() || node.size() != 2 || !node.get(1).isObject()) {
            return null;
        }
        return JSON.convertValue(node.get(1), Map.class);
    }

    private static byte[] bytes(ByteBuffer buffer) {
        ByteBuffer copy = buffer.duplicate();
        byte[] out = new byte[copy.remaining()];
        copy.get(out);
        return out;
    }

    /**
     * The map the engine resumes from, for a stored offset and its metadata; null for none (the
     * sentinels -2 earliest and -1 latest: the engine starts as its snapshot mode and slot say).
     */
    ObjectNode position(long offset, String metadata) throws java.io.IOException, SQLException {
        if (offset < 0) {
            return null;
        }
        ObjectNode kept = null;
        if (metadata != null && !metadata.isEmpty()) {
            JsonNode node = JSON.readTree(metadata);
            if (node.path("offset").isObject()) {
                kept = (ObjectNode) node.get("offset");
                if (node.path("next").asLong(-1) != offset) {
                    kept = null; // an operator moved the offset: the LSN decides
                }
            }
        }
        ObjectNode resume = JSON.createObjectNode();
        if (kept == null) {
            // Reset by an operator (or written by the engine mode, which keeps no map): resume
            // from the oldest change the replication slot holds; the change handler's rule
            // writes only the transactions whose commit LSN is at or above the offset. No slot
            // yet: no position (the engine starts as its snapshot mode says).
            Long oldest = slotRestartLsn();
            if (oldest == null) {
                return null;
            }
            // One byte past the slot's restart point: Debezium accepts it (not older than the
            // slot), and no WAL record starts there, so its locator resumes at the start of the
            // first transaction PostgreSQL sends rather than inside one.
            resume.put("lsn_commit", oldest + 1);
            resume.put("lsn", oldest + 1);
            resume.put("lsn_proc", oldest + 1);
            resume.put("ts_usec", 0L);
            return resume;
        }
        // The handler's own position: the last transaction delivered ended at LSN offset - 1.
        // The last event is put one byte below it, where no WAL record starts, so Debezium's
        // locator resumes at the start of the next transaction, never inside one.
        long commit = Math.max(offset - 1, 1);
        resume.put("lsn_commit", commit);
        resume.put("lsn", Math.max(commit - 1, 1));
        resume.put("lsn_proc", Math.max(commit - 1, 1));
        if (kept.has("txId")) {
            resume.set("txId", kept.get("txId"));
        }
        resume.put("ts_usec", kept.has("ts_usec") ? kept.get("ts_usec").asLong() : 0L);
        return resume;
    }

    /** The restart LSN of the connector's replication slot in the source database, or null when it has none. */
    private Long slotRestartLsn() throws SQLException {
        String host = string(engineConfig, "database.hostname", "localhost");
        String port = string(engineConfig, "database.port", "5432");
        String database = string(engineConfig, "database.dbname", "postgres");
        Properties props = new Properties();
        String user = string(engineConfig, "database.user", null);
        if (user != null) {
            props.setProperty("user", user);
        }
        String password = string(engineConfig, "database.password", null);
        if (password != null) {
            props.setProperty("password", password);
        }
        String slot = string(engineConfig, "slot.name", "debezium");
        String source = "jdbc:postgresql://" + host + ":" + port + "/" + database;
        try (Connection c = DriverManager.getConnection(source, props);
                PreparedStatement st = c.prepareStatement(
                        "SELECT (restart_lsn - '0/0')::bigint FROM pg_replication_slots WHERE slot_name = ? AND database = current_database()")) {
            st.setString(1, slot);
            try (ResultSet rs = st.executeQuery()) {
                return rs.next() ? rs.getLong(1) : null;
            }
        }
    }

    @Override
    public Future<Void> set(Map<ByteBuffer, ByteBuffer> values, Callback<Void> callback) {
        if (mode.equals("handler")) {
            // The change handler committed these positions with their rows, before the engine saw them processed.
            CompletableFuture<Void> done = CompletableFuture.completedFuture(null);
            if (callback != null) {
                callback.onCompletion(null, null);
            }
            return done;
        }
        return CompletableFuture.runAsync(() -> {
            try {
                commit(values);
                if (callback != null) {
                    callback.onCompletion(null, null);
                }
            } catch (Exception e) {
                closeConnection();
                if (callback != null) {
                    callback.onCompletion(e, null);
                }
                throw new ConnectException("could not commit positions of group " + group + " to offsetstore", e);
            }
        }, executor);
    }

    /** Engine mode: one transaction, fenced by the generation joined at start (SQLSTATE OS001 when stale). */
    private void commit(Map<ByteBuffer, ByteBuffer> values) throws Exception {
        List<String> topics = new ArrayList<>();
        List<Integer> partitions = new ArrayList<>();
        List<Long> offsets = new ArrayList<>();
        for (Map.Entry<ByteBuffer, ByteBuffer> e : values.entrySet()) {
            Map<String, Object> partition = partitionOf(e.getKey());
            if (partition == null || e.getValue() == null) {
                continue;
            }
            JsonNode value = JSON.readTree(bytes(e.getValue()));
            JsonNode position = value.path(offsetKey);
            if (!position.canConvertToLong()) {
                position = value.path("lsn");
            }
            if (!position.canConvertToLong()) {
                continue;
            }
            topics.add(topicOf(partition));
            partitions.add(0);
            offsets.add(position.asLong() + 1);
        }
        if (topics.isEmpty()) {
            return;
        }
        Connection c = connection();
        c.setAutoCommit(false);
        try {
            try (PreparedStatement st = c.prepareStatement("SELECT count(*) FROM offsetstore.begin_write(?, ?)")) {
                st.setString(1, group);
                st.setLong(2, generation);
                st.executeQuery().close();
            }
            try (PreparedStatement st = c.prepareStatement(
                    "SELECT count(*) FROM offsetstore.commit_offsets(?, ?, ?, ?, ?)")) {
                st.setString(1, group);
                st.setLong(2, generation);
                st.setArray(3, c.createArrayOf("text", topics.toArray()));
                st.setArray(4, c.createArrayOf("int4", partitions.toArray()));
                st.setArray(5, c.createArrayOf("int8", offsets.toArray()));
                st.executeQuery().close();
            }
            c.commit();
        } catch (Exception e) {
            try {
                c.rollback();
            } catch (SQLException ignored) {
                // the connection is closed by the caller
            }
            throw e;
        } finally {
            try {
                c.setAutoCommit(true);
            } catch (SQLException ignored) {
                // a broken connection is closed by the caller
            }
        }
    }

    @Override
    public Set<Map<String, Object>> connectorPartitions(String connectorName) {
        Set<Map<String, Object>> found = new HashSet<>();
        try {
            for (Object[] row : readGroup().values()) {
                String metadata = (String) row[1];
                if (metadata == null || metadata.isEmpty()) {
                    continue;
                }
                JsonNode partition = JSON.readTree(metadata).path("partition");
                if (partition.isObject()) {
                    @SuppressWarnings("unchecked")
                    Map<String, Object> map = JSON.convertValue(partition, LinkedHashMap.class);
                    found.add(map);
                }
            }
        } catch (Exception e) {
            closeConnection();
            throw new ConnectException("could not read the partitions of group " + group, e);
        }
        return found;
    }
}
