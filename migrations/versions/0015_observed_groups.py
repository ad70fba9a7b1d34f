"""Observed groups (issue 57): groups whose positions a pipeline keeps itself, recorded here.

``observed_groups`` holds a row per observed group (where its latest positions were read:
``spark:<query id>``, ``kafka:<cluster>/<group>``); ObserveOffsets writes its positions with
history entries of kind 6 (CHANGE_KIND_OBSERVED) and that source. Nothing commits to an
observed group: ``write_batch`` reads the table under the group's lock and refuses such a
request with outcome 3 (the sinks hear it through ``lock_for_write``, whose text is unchanged),
and the SQL API's ``commit_offsets`` and ``begin_write`` raise OS005 (``api_observed``).

A table of its own rather than a column of ``groups``: ALTER TABLE groups waits for every
writer holding a group's row, and an upgrade that also altered the history in the same
transaction (0013, from an older release) deadlocked with a running consumer that holds its
group and then writes history (tests/migrations/test_sql_api_upgrade.py).

The function texts below are frozen copies of ``storage/sql/`` as of this revision
(tests/storage/test_sql_functions.py fails when they drift).
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

# Alembic reads these four names.
revision: str = "0015"
down_revision: str | Sequence[str] | None = "0014"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

SCHEMA = "offsetstore"

WRITE_BATCH = """\
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
"""

API_OBSERVED = """\
-- OS005, the SQL API's refusal to write an observed group (a pipeline that keeps its own positions).
CREATE OR REPLACE FUNCTION offsetstore.api_observed(p_group text)
RETURNS void
LANGUAGE plpgsql IMMUTABLE AS $fn$
BEGIN
    RAISE EXCEPTION USING ERRCODE = 'OS005',
        MESSAGE = 'group ' || p_group || ' is observed: its positions are kept by the pipeline, not committed here',
        HINT = 'adopt it first (offsetstore groups adopt GROUP --from-observed), or write under another group id';
END
$fn$;
"""

BEGIN_WRITE = """\
-- SQL API v1 (docs/sql.md): in the caller's transaction, lock the group (creating or reviving
-- it), fence (generation 0 = unfenced; OS001 when stale) and return the stored next offsets:
-- the caller writes only records at or above them. The lock holds until the caller commits.
-- It writes (and holds the group): a commit grant.
CREATE OR REPLACE FUNCTION offsetstore.begin_write(group_id text, generation bigint)
RETURNS TABLE (topic text, "partition" integer, next_offset bigint)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
#variable_conflict use_column
DECLARE
    r record;
BEGIN
    PERFORM offsetstore.api_check_group(begin_write.group_id);
    PERFORM offsetstore.api_check_generation(begin_write.generation);
    IF offsetstore.api_authorize(begin_write.group_id, 'commit') THEN  -- it may create the group
        PERFORM offsetstore.api_check_quota(begin_write.group_id, '{}', '{}');
    END IF;
    FOR r IN SELECT * FROM offsetstore.lock_for_write(begin_write.group_id, begin_write.generation) LOOP
        IF r.outcome = 1 THEN
            PERFORM offsetstore.api_stale(begin_write.group_id, begin_write.generation, r.stored);
        ELSIF r.outcome = 3 THEN
            PERFORM offsetstore.api_observed(begin_write.group_id);
        END IF;
        topic := r.topic;
        "partition" := r.partition;
        next_offset := r."offset";
        RETURN NEXT;
    END LOOP;
END
$fn$;
"""

COMMIT_OFFSETS = """\
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
"""


def upgrade() -> None:
    op.create_table(
        "observed_groups",
        sa.Column("group_id", sa.Text(), nullable=False),
        sa.Column("source", sa.Text(), nullable=False),
        sa.Column("observed_since", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False),
        sa.PrimaryKeyConstraint("group_id", name=op.f("pk_observed_groups")),
        schema=SCHEMA,
    )
    for text in (WRITE_BATCH, API_OBSERVED, BEGIN_WRITE, COMMIT_OFFSETS):
        op.execute(text)
    # PostgreSQL grants EXECUTE to PUBLIC on every new function: only the owner runs it.
    op.execute(f"REVOKE EXECUTE ON FUNCTION {SCHEMA}.api_observed(text) FROM PUBLIC")


def downgrade() -> None:
    grants = importlib.import_module("offsetstore.migrations.versions.0011_sql_grants")
    budget = importlib.import_module("offsetstore.migrations.versions.0012_sql_history_budget")
    write_batch = importlib.import_module("offsetstore.migrations.versions.0014_compare_and_set_without_nested_loops")
    op.execute(budget.COMMIT_OFFSETS)
    op.execute(grants.BEGIN_WRITE)
    op.execute(f"DROP FUNCTION {SCHEMA}.api_observed(text)")
    op.execute(write_batch.WRITE_BATCH)
    op.drop_table("observed_groups", schema=SCHEMA)
