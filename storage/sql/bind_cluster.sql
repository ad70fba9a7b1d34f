-- SQL API v1 (docs/sql.md; issue 58): bind a live group to the Kafka cluster its records come
-- from, or check that it is bound to it: an unbound group binds on first use, a group bound to
-- another cluster is OS006 (both ids named), nothing written. Only a switch (`offsetstore groups
-- switch`) rebinds a group, and it moves the generation on: a writer that binds once after its
-- join, in the join's transaction or after it, is covered. Returns the bound cluster id. It
-- writes: a commit grant; the group must exist (join it first), so bindings stay under the quotas.
CREATE OR REPLACE FUNCTION offsetstore.bind_cluster(group_id text, cluster_id text)
RETURNS text
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
DECLARE
    bound text;
BEGIN
    PERFORM offsetstore.api_check_group(bind_cluster.group_id);
    PERFORM offsetstore.api_check_cluster(bind_cluster.cluster_id);
    PERFORM offsetstore.api_authorize(bind_cluster.group_id, 'commit');
    -- FOR SHARE: a delete of the group waits for this transaction, a concurrent bind does not.
    PERFORM FROM offsetstore.groups AS g
    WHERE g.group_id = bind_cluster.group_id AND g.deleted_at IS NULL FOR SHARE;
    IF NOT FOUND THEN
        PERFORM offsetstore.api_invalid('group_id', 'no such group: join it first (offsetstore.join_group)');
    END IF;
    INSERT INTO offsetstore.group_clusters AS c (group_id, kafka_cluster_id)
    VALUES (bind_cluster.group_id, bind_cluster.cluster_id)
    ON CONFLICT ON CONSTRAINT pk_group_clusters DO NOTHING;
    SELECT c.kafka_cluster_id INTO bound FROM offsetstore.group_clusters AS c WHERE c.group_id = bind_cluster.group_id;
    IF bound IS DISTINCT FROM bind_cluster.cluster_id THEN
        RAISE EXCEPTION USING ERRCODE = 'OS006',
            MESSAGE = 'group ' || bind_cluster.group_id || ' is bound to Kafka cluster ' || bound
                || ', and this consumer reads cluster ' || bind_cluster.cluster_id || ': nothing was written',
            DETAIL = 'bound_cluster_id ' || bound || ', cluster_id ' || bind_cluster.cluster_id,
            HINT = 'move the group with `offsetstore groups switch ' || bind_cluster.group_id
                || ' --to-bootstrap-server ...`, or read the cluster it is bound to';
    END IF;
    RETURN bound;
END
$fn$;
