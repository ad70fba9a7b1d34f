"""The SQL API binds a group to its Kafka cluster and stores record fingerprints (issue 58).

Any driver can now do what the Kafka recipe's writer does in Python (storage/clusters.py):
``bind_cluster`` binds a live group to the cluster its records come from (OS006 when it is bound
to another, both ids named), ``bound_cluster`` reads the binding, and ``commit_fingerprints``
stores the fingerprint of the record before each committed offset in the committing
transaction. No table changes (0016 made them); the existing functions are untouched.

The function texts below are frozen copies of ``storage/sql/*.sql`` as of this revision
(tests/storage/test_sql_functions.py fails when they drift); downgrade() drops them.
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

# Alembic reads these four names.
revision: str = "0018"
down_revision: str | Sequence[str] | None = "0017"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

SCHEMA = "offsetstore"

API_CHECK_CLUSTER = """\
-- A Kafka cluster id as the SQL API takes it (issue 58): not NULL, not empty, at most 255 bytes
-- (storage/resets.py's MAX_CLUSTER_ID_BYTES), no control character (it is shown in one-line errors).
CREATE OR REPLACE FUNCTION offsetstore.api_check_cluster(p_cluster text)
RETURNS void
LANGUAGE plpgsql IMMUTABLE AS $fn$
BEGIN
    IF p_cluster IS NULL OR p_cluster = '' THEN
        PERFORM offsetstore.api_invalid('cluster_id', 'must not be empty');
    ELSIF octet_length(p_cluster) > 255 THEN
        PERFORM offsetstore.api_invalid('cluster_id', 'must be at most 255 bytes');
    ELSIF p_cluster ~ '[[:cntrl:]]' THEN
        PERFORM offsetstore.api_invalid('cluster_id', 'must not contain control characters');
    END IF;
END
$fn$;
"""


BIND_CLUSTER = """\
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
"""


BOUND_CLUSTER = """\
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
"""


COMMIT_FINGERPRINTS = """\
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
"""

#: (name, identity arguments) of what this revision adds, callees first.
_ADDED = (
    ("api_check_cluster", "text"),
    ("bind_cluster", "text, text"),
    ("bound_cluster", "text"),
    ("commit_fingerprints", "text, bigint, text[], integer[], bigint[], bigint[], bytea[]"),
)


def upgrade() -> None:
    for text in (API_CHECK_CLUSTER, BIND_CLUSTER, BOUND_CLUSTER, COMMIT_FINGERPRINTS):
        op.execute(text)
    # PostgreSQL grants EXECUTE to PUBLIC on every new function: a role gets the API's by GRANT (docs/sql.md).
    for name, args in _ADDED:
        op.execute(f"REVOKE EXECUTE ON FUNCTION {SCHEMA}.{name}({args}) FROM PUBLIC")


def downgrade() -> None:
    for name, args in reversed(_ADDED):
        op.execute(f"DROP FUNCTION {SCHEMA}.{name}({args})")
