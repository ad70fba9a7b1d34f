-- SQL API v1 (docs/sql.md; issue 58): in the caller's transaction, after commit_offsets, store
-- the fingerprint of the record before each committed offset (its timestamp and the 16-byte
-- digest of kafka_integration/fingerprints.py), replacing the partition's previous one;
-- `groups switch` finds that record on the other cluster. Fenced as a commit (OS001, OS005);
-- each next_offset must be the partition's stored offset (OS002 otherwise: a fingerprint is
-- never of another offset's record), so it stores no partition the group does not have and
-- needs no quota. Arrays equally long, at most 10000 elements, one per partition (22023 with the
-- field, nothing written). Writes no history. Returns how many fingerprints it stored.
CREATE OR REPLACE FUNCTION offsetstore.commit_fingerprints(
    group_id text, generation bigint, topics text[], partitions integer[], next_offsets bigint[],
    timestamps_ms bigint[], digests bytea[]
) RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
DECLARE
    n integer := cardinality(topics);
    bad record;
    r record;
BEGIN
    PERFORM offsetstore.api_check_group(commit_fingerprints.group_id);
    PERFORM offsetstore.api_check_generation(commit_fingerprints.generation);
    PERFORM offsetstore.api_authorize(commit_fingerprints.group_id, 'commit');
    IF topics IS NULL THEN
        PERFORM offsetstore.api_invalid('topics', 'must not be NULL');
    ELSIF n > 10000 THEN
        PERFORM offsetstore.api_invalid('topics', 'at most 10000 elements in one call');
    ELSIF partitions IS NULL OR cardinality(partitions) <> n THEN
        PERFORM offsetstore.api_invalid('partitions', 'must be as long as topics');
    ELSIF next_offsets IS NULL OR cardinality(next_offsets) <> n THEN
        PERFORM offsetstore.api_invalid('next_offsets', 'must be as long as topics');
    ELSIF timestamps_ms IS NULL OR cardinality(timestamps_ms) <> n THEN
        PERFORM offsetstore.api_invalid('timestamps_ms', 'must be as long as topics');
    ELSIF digests IS NULL OR cardinality(digests) <> n THEN
        PERFORM offsetstore.api_invalid('digests', 'must be as long as topics');
    END IF;
    -- The first bad element, subscripts SQL's (1-based); then a partition named twice.
    SELECT * INTO bad FROM (
        SELECT u.i, CASE
            WHEN u.t IS NULL OR u.t = '' THEN ARRAY['topics', 'must not be empty']
            WHEN length(u.t) > 249 THEN ARRAY['topics', 'must be at most 249 characters']
            WHEN u.t !~ '^[A-Za-z0-9._-]+$' THEN
                ARRAY['topics', 'may contain only ASCII letters, digits, ''.'', ''_'' and ''-''']
            WHEN u.p IS NULL OR u.p < 0 THEN ARRAY['partitions', 'must be >= 0']
            WHEN u.o IS NULL OR u.o < 1 THEN ARRAY['next_offsets', 'must be >= 1 (the record''s offset + 1)']
            WHEN u.ts IS NULL OR u.ts < -1 THEN ARRAY['timestamps_ms', 'must be >= -1 (-1: the record has none)']
            WHEN u.d IS NULL OR octet_length(u.d) <> 16 THEN
                ARRAY['digests', 'must be 16 bytes (the first 16 of the SHA-256 of key, value and headers)']
            WHEN count(*) OVER (PARTITION BY u.t, u.p) > 1 THEN ARRAY['partitions', 'names a partition twice']
        END AS why
        FROM unnest(topics, partitions, next_offsets, timestamps_ms, digests) WITH ORDINALITY AS u(t, p, o, ts, d, i)
    ) AS c WHERE c.why IS NOT NULL ORDER BY c.i LIMIT 1;
    IF FOUND THEN
        PERFORM offsetstore.api_invalid(bad.why[1] || '[' || bad.i || ']', bad.why[2]);
    END IF;
    IF n = 0 THEN
        RETURN 0;  -- nothing to store: no lock taken, no group created
    END IF;

    -- The group's lock and fence, as begin_write's (a no-op in commit_offsets' transaction).
    FOR r IN SELECT * FROM offsetstore.lock_for_write(commit_fingerprints.group_id, commit_fingerprints.generation)
    LOOP
        IF r.outcome = 1 THEN
            PERFORM offsetstore.api_stale(commit_fingerprints.group_id, commit_fingerprints.generation, r.stored);
        ELSIF r.outcome = 3 THEN
            PERFORM offsetstore.api_observed(commit_fingerprints.group_id);
        END IF;
    END LOOP;
    SELECT u.t, u.p, u.o, o."offset" AS stored INTO bad
    FROM unnest(topics, partitions, next_offsets) WITH ORDINALITY AS u(t, p, o, i)
    LEFT JOIN offsetstore.offsets AS o
        ON o.group_id = commit_fingerprints.group_id AND o.topic = u.t AND o.partition = u.p
    WHERE o."offset" IS DISTINCT FROM u.o ORDER BY u.i LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'OS002',
            MESSAGE = 'offset mismatch for group ' || commit_fingerprints.group_id || ': ' || bad.t || ':' || bad.p,
            DETAIL = 'topic ' || bad.t || ', partition ' || bad.p || ', stored ' || coalesce(bad.stored, -1)
                || ', expected ' || bad.o,
            HINT = 'a fingerprint is of the record before the stored offset: commit that offset first, in the same transaction';
    END IF;
    INSERT INTO offsetstore.record_fingerprints AS f (group_id, topic, "partition", "offset", timestamp_ms, digest)
    SELECT commit_fingerprints.group_id, u.t, u.p, u.o, u.ts, u.d
    FROM unnest(topics, partitions, next_offsets, timestamps_ms, digests) AS u(t, p, o, ts, d)
    ON CONFLICT ON CONSTRAINT pk_record_fingerprints DO UPDATE
    SET "offset" = excluded."offset", timestamp_ms = excluded.timestamp_ms, digest = excluded.digest;
    RETURN n;
END
$fn$;
