package offsetstore.flink;

import java.io.Serializable;
import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.util.HashMap;
import java.util.Map;
import java.util.Properties;

/**
 * Where the store is: a JDBC URL, its properties and a group id, with the SQL API v1's calls that
 * the sink and the offsets initializer share (docs/sql.md).
 *
 * <p>Every connection sets {@code prepareThreshold=0}: no server-side prepared statement outlives a
 * transaction, so PgBouncer's transaction mode serves it. Nothing is set per session.
 */
public final class StoreJdbc implements Serializable {
    private static final long serialVersionUID = 1L;

    private final String url;
    private final Properties properties;
    private final String groupId;

    public StoreJdbc(String url, Properties properties, String groupId) {
        if (url == null || !url.startsWith("jdbc:postgresql:")) {
            throw new IllegalArgumentException(
                    "offsetstore: the store's URL must be a jdbc:postgresql: URL, not " + redacted(url)
                            + " (give the user and password as properties, not in the URL)");
        }
        if (groupId == null || groupId.isEmpty()) {
            throw new IllegalArgumentException("offsetstore: a group id is required");
        }
        this.url = url;
        this.properties = new Properties();
        if (properties != null) {
            this.properties.putAll(properties);
        }
        this.properties.setProperty("prepareThreshold", "0");
        if (!this.properties.containsKey("ApplicationName")) {
            this.properties.setProperty("ApplicationName", "offsetstore-flink"); // pg_stat_activity tells the sink's sessions
        }
        this.groupId = groupId;
    }

    /**
     * {@code url} as an error message may show it: without the user info before its last "@" (a password) and
     * without its query (where JDBC puts {@code password=}).
     */
    static String redacted(String url) {
        if (url == null) {
            return "null";
        }
        String shown = url;
        int at = shown.lastIndexOf('@');
        if (at >= 0) {
            int slashes = shown.indexOf("//");
            int start = slashes >= 0 && slashes < at ? slashes + 2 : 0;
            shown = shown.substring(0, start) + "..." + shown.substring(at);
        }
        int query = shown.indexOf('?');
        return query >= 0 ? shown.substring(0, query) + "?..." : shown;
    }

    public String groupId() {
        return groupId;
    }

    /** A copy of the connection properties (the user and password, the driver's settings). */
    Properties properties() {
        Properties copy = new Properties();
        copy.putAll(properties);
        return copy;
    }

    static {
        // DriverManager finds drivers on the system classpath only; a job's jars (PyFlink's pipeline.jars, a
        // cluster's user-code classloader) hold PostgreSQL's driver in a classloader of their own: register it.
        try {
            Class.forName("org.postgresql.Driver", true, StoreJdbc.class.getClassLoader());
        } catch (ClassNotFoundException e) {
            // Another driver, or none: DriverManager's "No suitable driver" then names the URL.
        }
    }

    /** A connection with auto-commit off: the caller owns the transaction. */
    public Connection connect() throws SQLException {
        Connection conn;
        try {
            conn = DriverManager.getConnection(url, properties);
        } catch (SQLException e) {
            String message = e.getMessage();
            if (message == null || !message.contains(url)) {
                throw e;
            }
            // DriverManager's "No suitable driver found for <url>": the URL as shown elsewhere, no cause kept.
            throw new SQLException(message.replace(url, redacted(url)), e.getSQLState(), e.getErrorCode());
        }
        conn.setAutoCommit(false);
        return conn;
    }

    /** Joins the group: a new generation, which fences every writer holding an older one. */
    public long joinGroup(String memberId) throws SQLException {
        return joinGroup(memberId, null);
    }

    /**
     * Joins the group and, with a {@code clusterId}, binds it to that Kafka cluster in the same
     * transaction ({@code offsetstore.bind_cluster}): a group bound to another cluster is SQLSTATE
     * OS006 and nothing is joined. A switch moves the generation on, so one check per join covers
     * every write of the generation.
     */
    public long joinGroup(String memberId, String clusterId) throws SQLException {
        try (Connection conn = connect()) {
            long generation;
            try (PreparedStatement st = conn.prepareStatement("SELECT offsetstore.join_group(?, ?, ?)")) {
                st.setString(1, groupId);
                st.setString(2, memberId);
                st.setString(3, hostName());
                try (ResultSet rs = st.executeQuery()) {
                    rs.next();
                    generation = rs.getLong(1);
                }
            }
            if (clusterId != null) {
                try (PreparedStatement st = conn.prepareStatement("SELECT offsetstore.bind_cluster(?, ?)")) {
                    st.setString(1, groupId);
                    st.setString(2, clusterId);
                    st.executeQuery().close();
                }
            }
            conn.commit();
            return generation;
        }
    }

    /** Binds the group to a Kafka cluster, or checks it is bound to it ({@code offsetstore.bind_cluster}; OS006 if not). */
    public void bindCluster(String clusterId) throws SQLException {
        try (Connection conn = connect();
                PreparedStatement st = conn.prepareStatement("SELECT offsetstore.bind_cluster(?, ?)")) {
            st.setString(1, groupId);
            st.setString(2, clusterId);
            st.executeQuery().close();
            conn.commit();
        }
    }

    /** The Kafka cluster id the group is bound to ({@code offsetstore.bound_cluster}); null when none. */
    public String boundCluster() throws SQLException {
        try (Connection conn = connect();
                PreparedStatement st = conn.prepareStatement("SELECT offsetstore.bound_cluster(?)")) {
            st.setString(1, groupId);
            String bound;
            try (ResultSet rs = st.executeQuery()) {
                rs.next();
                bound = rs.getString(1);
            }
            conn.commit();
            return bound;
        }
    }

    /** The group's stored next offsets by "topic:partition" (sentinels -2 and -1 included); empty for an unknown group. */
    public Map<String, Long> readOffsets() throws SQLException {
        Map<String, Long> out = new HashMap<>();
        try (Connection conn = connect();
                PreparedStatement st =
                        conn.prepareStatement("SELECT topic, \"partition\", next_offset FROM offsetstore.read_offsets(?)")) {
            st.setString(1, groupId);
            try (ResultSet rs = st.executeQuery()) {
                while (rs.next()) {
                    out.put(key(rs.getString(1), rs.getInt(2)), rs.getLong(3));
                }
            }
            conn.commit();
        }
        return out;
    }

    static String key(String topic, int partition) {
        return topic + ":" + partition;
    }

    private static String hostName() {
        try {
            return java.net.InetAddress.getLocalHost().getHostName();
        } catch (java.io.IOException e) {
            return "";
        }
    }
}
