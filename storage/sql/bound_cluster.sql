-- SQL API v1 (docs/sql.md; issue 58): the Kafka cluster id a group is bound to, NULL when it is
-- bound to none or unknown. Takes no lock; a read grant (an offsets initializer checks it at start).
CREATE OR REPLACE FUNCTION offsetstore.bound_cluster(group_id text)
RETURNS text
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
BEGIN
    PERFORM offsetstore.api_check_group(bound_cluster.group_id);
    PERFORM offsetstore.api_authorize(bound_cluster.group_id, 'read');
    RETURN (SELECT c.kafka_cluster_id FROM offsetstore.group_clusters AS c WHERE c.group_id = bound_cluster.group_id);
END
$fn$;
