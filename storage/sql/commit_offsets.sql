-- SQL API v1 (docs/sql.md): commit next offsets (Kafka's convention: last written + 1) in the
-- caller's transaction, through write_batch: fenced (OS001), compare-and-set where
-- expected_offsets is given (OS002; -1 = none stored; a NULL element is not checked), history
-- rows as every commit writes them. A partition may repeat: its largest offset wins, so a
-- caller may pass each written record's offset + 1. Checks are storage/validate.py's rules.
-- A commit grant on the group, the role's quotas and history budget (each partition a history
-- row); the history's actor is the role that logged in (session_user), whatever `actor` says
-- (kept, and checked, for v1's signature).
CREATE OR REPLACE FUNCTION offsetstore.commit_offsets(
    group_id text, generation bigint, topics text[], partitions integer[], next_offsets bigint[],
    expected_offsets bigint[] DEFAULT NULL, actor text DEFAULT 'sql'
) RETURNS TABLE (topic text, "partition" integer, next_offset bigint, commit_time timestamptz)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
#variable_conflict use_column
DECLARE
    n integer := cardinality(topics);
    bad record;
    t text[];
    p integer[];
    o bigint[];
    e bigint[];
    conflict integer;
    invalid boolean;
    restricted boolean;
    r record;
BEGIN
    PERFORM offsetstore.api_check_group(commit_offsets.group_id);
    PERFORM offsetstore.api_check_generation(commit_offsets.generation);
    restricted := offsetstore.api_authorize(commit_offsets.group_id, 'commit');
    -- Bounded before anything walks the arrays (the gRPC API counts a request's entries on
    -- the wire); repeats are allowed here (each record's offset + 1), hence 10 per partition.
    IF topics IS NULL THEN
        PERFORM offsetstore.api_invalid('topics', 'must not be NULL');
    ELSIF n > 100000 THEN
        PERFORM offsetstore.api_invalid('topics', 'at most 100000 elements in one call');
    ELSIF partitions IS NULL OR cardinality(partitions) <> n THEN
        PERFORM offsetstore.api_invalid('partitions', 'must be as long as topics');
    ELSIF next_offsets IS NULL OR cardinality(next_offsets) <> n THEN
        PERFORM offsetstore.api_invalid('next_offsets', 'must be as long as topics');
    ELSIF expected_offsets IS NOT NULL AND cardinality(expected_offsets) <> n THEN
        PERFORM offsetstore.api_invalid('expected_offsets', 'must be as long as topics, or NULL');
    ELSIF actor IS NULL OR octet_length(actor) > 255 THEN
        PERFORM offsetstore.api_invalid('actor', 'must not be NULL and at most 255 bytes');
    END IF;

    -- One pass: one offset per partition, the largest; whether any element is bad (the
    -- topic's rule runs once per partition, not per element); where the expected offsets
    -- of a partition disagree.
    SELECT array_agg(g.t ORDER BY g.t, g.p), array_agg(g.p ORDER BY g.t, g.p),
        array_agg(g.o ORDER BY g.t, g.p), array_agg(g.e ORDER BY g.t, g.p),
        max(g.conflict), count(*), bool_or(g.bad)
    INTO t, p, o, e, conflict, n, invalid
    FROM (
        SELECT u.t, u.p, max(u.o) AS o, max(u.e) AS e,
            CASE WHEN max(u.e) <> min(u.e) THEN max(u.i) END AS conflict,
            u.t IS NULL OR u.t = '' OR length(u.t) > 249 OR u.t !~ '^[A-Za-z0-9._-]+$' OR u.p IS NULL OR u.p < 0
                OR bool_or(u.o IS NULL OR u.o < 0 OR u.e < -1) AS bad
        FROM unnest(topics, partitions, next_offsets, coalesce(expected_offsets, array_fill(NULL::bigint, ARRAY[n])))
            WITH ORDINALITY AS u(t, p, o, e, i)
        GROUP BY u.t, u.p
    ) AS g;
    IF invalid THEN
        -- Only now element by element: the first bad one, subscripts SQL's (1-based).
        SELECT * INTO bad FROM (
            SELECT u.i, CASE
                WHEN u.t IS NULL OR u.t = '' THEN ARRAY['topics', 'must not be empty']
                WHEN length(u.t) > 249 THEN ARRAY['topics', 'must be at most 249 characters']
                WHEN u.t !~ '^[A-Za-z0-9._-]+$' THEN
                    ARRAY['topics', 'may contain only ASCII letters, digits, ''.'', ''_'' and ''-''']
                WHEN u.p IS NULL OR u.p < 0 THEN ARRAY['partitions', 'must be >= 0']
                WHEN u.o IS NULL OR u.o < 0 THEN ARRAY['next_offsets', 'must be >= 0']
                WHEN u.e < -1 THEN ARRAY['expected_offsets', 'must be >= 0, or -1 for ''no offset stored yet''']
            END AS why
            FROM unnest(topics, partitions, next_offsets, expected_offsets) WITH ORDINALITY AS u(t, p, o, e, i)
        ) AS c WHERE c.why IS NOT NULL ORDER BY c.i LIMIT 1;
        PERFORM offsetstore.api_invalid(bad.why[1] || '[' || bad.i || ']', bad.why[2]);
    END IF;
    IF conflict IS NOT NULL THEN
        PERFORM offsetstore.api_invalid('expected_offsets[' || conflict || ']',
            'differs from another expected offset of the same partition');
    ELSIF n > 10000 THEN
        PERFORM offsetstore.api_invalid('partitions', 'at most 10000 distinct partitions in one call');
    END IF;
    IF restricted THEN
        PERFORM offsetstore.api_check_quota(commit_offsets.group_id, coalesce(t, '{}'), coalesce(p, '{}'));
        PERFORM offsetstore.api_check_history(n);
    END IF;

    FOR r IN SELECT * FROM offsetstore.write_batch(
        ARRAY[false], ARRAY[commit_offsets.group_id], ARRAY[commit_offsets.generation], ARRAY[session_user::text],
        ARRAY[''], ARRAY[''], ARRAY[expected_offsets IS NOT NULL], ARRAY[1], ARRAY[n], coalesce(t, '{}'),
        coalesce(p, '{}'), coalesce(o, '{}'), array_fill(''::text, ARRAY[n]), coalesce(e, '{}')
    ) LOOP
        IF r.outcome = 1 THEN
            PERFORM offsetstore.api_stale(commit_offsets.group_id, commit_offsets.generation, r.stored);
        ELSIF r.outcome = 3 THEN
            PERFORM offsetstore.api_observed(commit_offsets.group_id);
        ELSIF r.outcome = 2 THEN
            RAISE EXCEPTION USING ERRCODE = 'OS002',
                MESSAGE = 'offset mismatch for group ' || commit_offsets.group_id || ': ' || r.topic || ':' || r.partition,
                DETAIL = 'topic ' || r.topic || ', partition ' || r.partition || ', stored ' || r.stored
                    || ', expected ' || r."offset",
                HINT = 'stored -1 means no offset is stored; read the offsets again and retry';
        END IF;
        topic := r.topic;
        "partition" := r.partition;
        next_offset := r."offset";
        commit_time := r.commit_time;
        RETURN NEXT;
    END LOOP;
END
$fn$;
