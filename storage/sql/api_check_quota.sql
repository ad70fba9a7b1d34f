-- The SQL API's quotas (docs/sql.md), a tokens file's max_groups and max_partitions for a role:
-- its row in sql_quotas bounds the live groups under the prefixes it may commit to (creating
-- or reviving p_group counts one) and the partitions those groups store (p_topics and
-- p_partitions, distinct, are the call's). 0 or no row: no quota; admin on every group ('')
-- has none. OS004 before anything is written. Each prefix is counted by a statement planned
-- for its value, so the live-prefix index of migration 0005 serves it. Concurrent creations
-- may overshoot by what they add at once, as the server's quotas may.
CREATE OR REPLACE FUNCTION offsetstore.api_check_quota(p_group text, p_topics text[], p_partitions integer[])
RETURNS void
LANGUAGE plpgsql STABLE AS $fn$
DECLARE
    q record;
    prefixes text[];
    prefix text;
    counted bigint;
    total bigint := 0;
    added bigint;
BEGIN
    SELECT s.max_groups, s.max_partitions INTO q FROM offsetstore.sql_quotas AS s WHERE s.role = session_user::text;
    IF NOT FOUND OR (q.max_groups = 0 AND q.max_partitions = 0) OR EXISTS (
        SELECT FROM offsetstore.sql_grants AS g
        WHERE g.role = session_user::text AND g.group_prefix = '' AND g.access = 'admin'
    ) THEN
        RETURN;
    END IF;
    -- The prefixes it may commit to, without those another covers: disjoint sets of groups.
    SELECT array_agg(g.group_prefix) INTO prefixes FROM offsetstore.sql_grants AS g
    WHERE g.role = session_user::text AND g.access <> 'read' AND NOT EXISTS (
        SELECT FROM offsetstore.sql_grants AS h
        WHERE h.role = g.role AND h.access <> 'read' AND h.group_prefix <> g.group_prefix
            AND starts_with(g.group_prefix, h.group_prefix)
    );
    IF q.max_groups > 0
        AND NOT EXISTS (SELECT FROM offsetstore.groups AS g WHERE g.group_id = p_group AND g.deleted_at IS NULL)
    THEN
        FOREACH prefix IN ARRAY coalesce(prefixes, '{}') LOOP
            EXECUTE 'SELECT count(*) FROM offsetstore.groups AS g WHERE g.deleted_at IS NULL AND starts_with(g.group_id, $1)'
                INTO counted USING prefix;
            total := total + counted;
        END LOOP;
        IF total >= q.max_groups THEN
            RAISE EXCEPTION USING ERRCODE = 'OS004',
                MESSAGE = 'quota exceeded for role ' || session_user || ': max_groups',
                DETAIL = 'max_groups ' || q.max_groups || ', groups ' || total,
                HINT = 'delete groups it no longer needs, or ask the store''s owner for a higher quota (offsetstore.set_quotas)';
        END IF;
    END IF;
    IF q.max_partitions > 0 AND cardinality(p_topics) > 0 THEN
        SELECT count(*) INTO added FROM unnest(p_topics, p_partitions) AS u(t, p)
        WHERE NOT EXISTS (
            SELECT FROM offsetstore.offsets AS o WHERE o.group_id = p_group AND o.topic = u.t AND o.partition = u.p
        );
        IF added > 0 THEN
            total := 0;
            FOREACH prefix IN ARRAY coalesce(prefixes, '{}') LOOP
                EXECUTE 'SELECT count(*) FROM offsetstore.groups AS g JOIN offsetstore.offsets AS o'
                    ' ON o.group_id = g.group_id WHERE g.deleted_at IS NULL AND starts_with(g.group_id, $1)'
                    INTO counted USING prefix;
                total := total + counted;
            END LOOP;
            IF total + added > q.max_partitions THEN
                RAISE EXCEPTION USING ERRCODE = 'OS004',
                    MESSAGE = 'quota exceeded for role ' || session_user || ': max_partitions',
                    DETAIL = 'max_partitions ' || q.max_partitions || ', partitions ' || total || ', adding ' || added,
                    HINT = 'delete offsets it no longer needs, or ask the store''s owner for a higher quota (offsetstore.set_quotas)';
            END IF;
        END IF;
    END IF;
END
$fn$;
