-- Requests are r_*[i]; a commit request's offsets are o_*[r_first[i] : r_last[i]].
-- Outcomes: 0 done (a row per committed offset, or for a join its generation in
-- `stored`), 1 stale generation (`stored`: the current one), 2 compare-and-set
-- mismatch (`topic`, `partition`, `offset` the expected one, `stored` the stored one),
-- 3 the group is observed (`metadata`: where its positions are read), never committed to.
CREATE OR REPLACE FUNCTION offsetstore.write_batch(
    r_join boolean[], r_group text[], r_generation bigint[], r_actor text[],
    r_member_id text[], r_member_host text[], r_cas boolean[], r_first integer[], r_last integer[],
    o_topic text[], o_partition integer[], o_offset bigint[], o_metadata text[], o_expected bigint[]
) RETURNS TABLE (
    req integer, outcome smallint, topic text, "partition" integer, "offset" bigint,
    metadata text, commit_time timestamptz, stored bigint
)
LANGUAGE plpgsql AS $fn$
#variable_conflict use_column
DECLARE
    i integer;
    gen bigint;
    gone timestamptz;
    created boolean;
    bad record;
    nestloop text;
    mismatch boolean;
    observed text;
BEGIN
    -- An acknowledged offset is durable whoever calls: the SQL API's callers bring sessions of
    -- their own (and a pooler may drop settings). synchronous_commit is read at COMMIT, so
    -- setting it for the transaction holds; a stronger choice of the caller (remote_apply) stays.
    IF current_setting('synchronous_commit') IN ('off', 'local', 'remote_write') THEN
        PERFORM set_config('synchronous_commit', 'on', true);
    END IF;
    FOR i IN SELECT s FROM generate_subscripts(r_group, 1) AS s ORDER BY r_group[s], s LOOP
        IF r_join[i] THEN
            RETURN QUERY
            INSERT INTO offsetstore.groups AS g (group_id, generation, member_id, member_host)
            VALUES (r_group[i], 1, r_member_id[i], r_member_host[i])
            ON CONFLICT (group_id) DO UPDATE SET
                generation = g.generation + 1, deleted_at = NULL,
                member_id = excluded.member_id, member_host = excluded.member_host,
                -- a join is activity for retention; a commit's shows in offsets.commit_time
                active_at = statement_timestamp()
            RETURNING i, 0::smallint, NULL::text, NULL::integer, NULL::bigint, NULL::text, NULL::timestamptz,
                g.generation;
            CONTINUE;
        END IF;

        SELECT l.generation, l.deleted_at, l.created INTO gen, gone, created
        FROM offsetstore.lock_group(r_group[i], true) AS l;
        -- Read under the group's lock, which ObserveOffsets takes too, in a snapshot of its own.
        SELECT o.source INTO observed FROM offsetstore.observed_groups AS o WHERE o.group_id = r_group[i];
        IF observed IS NOT NULL THEN  -- a pipeline that keeps its own positions: never fenced, never written
            RETURN QUERY SELECT i, 3::smallint, NULL::text, NULL::integer, NULL::bigint, observed,
                NULL::timestamptz, gen;
            CONTINUE;
        END IF;
        IF offsetstore.stale_generation(r_generation[i], gen) THEN
            IF created THEN  -- a refused request leaves no trace, not even a new group
                DELETE FROM offsetstore.groups AS g WHERE g.group_id = r_group[i];
            END IF;
            RETURN QUERY SELECT i, 1::smallint, NULL::text, NULL::integer, NULL::bigint, NULL::text,
                NULL::timestamptz, gen;
            CONTINUE;
        END IF;
        IF r_cas[i] THEN
            -- Planned without nested loops: for a group the statistics do not know yet (a new
            -- consumer of 10,000 partitions), PostgreSQL estimated the group at one row and
            -- compared every requested partition with every stored row (6 s for one commit, past
            -- the statement timeout). A hash or merge join is linear whatever the estimate; the
            -- caller's setting is back for the rest of its transaction right after.
            nestloop := current_setting('enable_nestloop');
            PERFORM set_config('enable_nestloop', 'off', true);
            SELECT u.topic, u.partition, u.expected, coalesce(o."offset", -1) AS actual INTO bad
            FROM unnest(
                o_topic[r_first[i] : r_last[i]], o_partition[r_first[i] : r_last[i]], o_expected[r_first[i] : r_last[i]]
            ) WITH ORDINALITY AS u(topic, partition, expected, n)
            LEFT JOIN offsetstore.offsets AS o
                ON o.group_id = r_group[i] AND o.topic = u.topic AND o.partition = u.partition
            WHERE u.expected IS NOT NULL AND u.expected <> coalesce(o."offset", -1)
            ORDER BY u.n
            LIMIT 1;
            mismatch := FOUND;  -- before PERFORM, which sets FOUND itself
            PERFORM set_config('enable_nestloop', nestloop, true);
            IF mismatch THEN
                IF created THEN
                    DELETE FROM offsetstore.groups AS g WHERE g.group_id = r_group[i];
                END IF;
                RETURN QUERY SELECT i, 2::smallint, bad.topic, bad.partition, bad.expected, NULL::text,
                    NULL::timestamptz, bad.actual;
                CONTINUE;
            END IF;
        END IF;

        IF gone IS NOT NULL THEN
            -- A commit brings a deleted group back, with the generation its id kept.
            UPDATE offsetstore.groups AS g SET deleted_at = NULL WHERE g.group_id = r_group[i];
        END IF;
        -- u reads each partition's offset before the upsert (one statement, one snapshot);
        -- history records real changes only. No join between two CTEs: a cached generic
        -- plan cannot know their sizes, and a nested loop over two large ones is quadratic.
        RETURN QUERY
        WITH u AS (
            SELECT u.topic, u.partition, u."offset", u.metadata, o."offset" AS previous
            FROM unnest(
                o_topic[r_first[i] : r_last[i]], o_partition[r_first[i] : r_last[i]],
                o_offset[r_first[i] : r_last[i]], o_metadata[r_first[i] : r_last[i]]
            ) AS u(topic, partition, "offset", metadata)
            LEFT JOIN offsetstore.offsets AS o
                ON o.group_id = r_group[i] AND o.topic = u.topic AND o.partition = u.partition
        ), up AS (
            INSERT INTO offsetstore.offsets AS o (group_id, topic, partition, "offset", metadata)
            SELECT r_group[i], u.topic, u.partition, u."offset", u.metadata FROM u
            ON CONFLICT (group_id, topic, partition) DO UPDATE SET
                "offset" = excluded."offset", metadata = excluded.metadata, commit_time = statement_timestamp()
            RETURNING o.topic, o.partition, o."offset", o.metadata, o.commit_time
        ), hist AS (
            INSERT INTO offsetstore.offset_history
                (group_id, topic, partition, previous_offset, new_offset, kind, generation, actor)
            SELECT r_group[i], u.topic, u.partition, u.previous, u."offset", 1, gen, r_actor[i]
            FROM u WHERE u.previous IS DISTINCT FROM u."offset"
        )
        SELECT i, 0::smallint, up.topic, up.partition, up."offset", up.metadata, up.commit_time, gen FROM up;
    END LOOP;
END
$fn$;
