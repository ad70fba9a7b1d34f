"""The group's lock, the fence and the sinks' lock_for_write become SQL functions beside write_batch.

``lock_group`` (the row lock, creating the row on a first write) and
``stale_generation`` (the fence) are what write_batch did inline, now callable by
everything that writes: resets and deletes lock through ``lock_group``, and the sinks'
``lock_for_write`` is a commit of no offsets through write_batch followed by the stored
offsets. The rule then exists once, in SQL, instead of in SQL and again in Python.

The function texts below are frozen copies of ``storage/sql/*.sql`` as of this revision:
a migration never reads the live files, whose later edits belong to later migrations
(DEVELOPERS.md, "Concurrency"; tests/storage/test_sql_functions.py fails when they drift).
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence

from alembic import op

# Alembic reads these four names.
revision: str = "0008"
down_revision: str | Sequence[str] | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

SCHEMA = "offsetstore"

STALE_GENERATION = """\
-- The fence: a writer's generation is stale unless it is 0 (unfenced) or the group's current one.
CREATE OR REPLACE FUNCTION offsetstore.stale_generation(requested bigint, current_generation bigint)
RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $fn$
    SELECT requested <> 0 AND requested <> current_generation
$fn$;
"""

LOCK_GROUP = """\
-- Every write to a group locks its row first; with p_create, a group never seen gets one.
-- generation is NULL for a group that has no row (and was not created). `created` lets a
-- caller that refuses the request remove the row again: a refusal leaves no trace.
CREATE OR REPLACE FUNCTION offsetstore.lock_group(
    p_group text, p_create boolean, OUT generation bigint, OUT deleted_at timestamptz, OUT created boolean
)
LANGUAGE plpgsql AS $fn$
BEGIN
    created := false;
    -- NO KEY UPDATE: conflicts with every other writer of the group, not with readers.
    SELECT g.generation, g.deleted_at INTO generation, deleted_at
    FROM offsetstore.groups AS g WHERE g.group_id = p_group FOR NO KEY UPDATE;
    IF FOUND OR NOT p_create THEN
        RETURN;
    END IF;
    -- A concurrent first write may insert it first: then lock the row it made.
    INSERT INTO offsetstore.groups AS g (group_id) VALUES (p_group) ON CONFLICT DO NOTHING;
    created := FOUND;
    SELECT g.generation, g.deleted_at INTO generation, deleted_at
    FROM offsetstore.groups AS g WHERE g.group_id = p_group FOR NO KEY UPDATE;
END
$fn$;
"""

WRITE_BATCH = """\
-- Requests are r_*[i]; a commit request's offsets are o_*[r_first[i] : r_last[i]].
-- Outcomes: 0 done (a row per committed offset, or for a join its generation in
-- `stored`), 1 stale generation (`stored`: the current one), 2 compare-and-set
-- mismatch (`topic`, `partition`, `offset` the expected one, `stored` the stored one).
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
BEGIN
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
        IF offsetstore.stale_generation(r_generation[i], gen) THEN
            IF created THEN  -- a refused request leaves no trace, not even a new group
                DELETE FROM offsetstore.groups AS g WHERE g.group_id = r_group[i];
            END IF;
            RETURN QUERY SELECT i, 1::smallint, NULL::text, NULL::integer, NULL::bigint, NULL::text,
                NULL::timestamptz, gen;
            CONTINUE;
        END IF;
        IF r_cas[i] THEN
            SELECT u.topic, u.partition, u.expected, coalesce(o."offset", -1) AS actual INTO bad
            FROM unnest(
                o_topic[r_first[i] : r_last[i]], o_partition[r_first[i] : r_last[i]], o_expected[r_first[i] : r_last[i]]
            ) WITH ORDINALITY AS u(topic, partition, expected, n)
            LEFT JOIN offsetstore.offsets AS o
                ON o.group_id = r_group[i] AND o.topic = u.topic AND o.partition = u.partition
            WHERE u.expected IS NOT NULL AND u.expected <> coalesce(o."offset", -1)
            ORDER BY u.n
            LIMIT 1;
            IF FOUND THEN
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

LOCK_FOR_WRITE = """\
-- For writers that decide under the lock what to write (the sinks): a commit of no offsets
-- through write_batch (lock, create or revive, fence), then the group's stored offsets.
-- Outcomes as write_batch's: 0 one row per stored offset (`offset`), 1 stale generation
-- (one row, `stored` the current generation).
CREATE OR REPLACE FUNCTION offsetstore.lock_for_write(p_group text, p_generation bigint)
RETURNS TABLE (outcome smallint, topic text, "partition" integer, "offset" bigint, stored bigint)
LANGUAGE plpgsql AS $fn$
#variable_conflict use_column
BEGIN
    RETURN QUERY
    SELECT w.outcome, NULL::text, NULL::integer, NULL::bigint, w.stored
    FROM offsetstore.write_batch(
        ARRAY[false], ARRAY[p_group], ARRAY[p_generation], ARRAY[''], ARRAY[''], ARRAY[''], ARRAY[false],
        ARRAY[1], ARRAY[0], '{}'::text[], '{}'::integer[], '{}'::bigint[], '{}'::text[], '{}'::bigint[]
    ) AS w;
    IF FOUND THEN  -- an empty commit has a row only when refused
        RETURN;
    END IF;
    RETURN QUERY
    SELECT 0::smallint, o.topic, o.partition, o."offset", NULL::bigint
    FROM offsetstore.offsets AS o WHERE o.group_id = p_group;
END
$fn$;
"""


_WRITE_BATCH_ARGS = (
    "boolean[], text[], bigint[], text[], text[], text[], boolean[], integer[], integer[], "
    "text[], integer[], bigint[], text[], bigint[]"
)


def upgrade() -> None:
    # Callees first, though PL/pgSQL resolves names only when a function runs.
    op.execute(STALE_GENERATION)
    op.execute(LOCK_GROUP)
    op.execute(WRITE_BATCH)
    op.execute(LOCK_FOR_WRITE)


def downgrade() -> None:
    op.execute(f"DROP FUNCTION {SCHEMA}.lock_for_write(text, bigint)")
    # 0004's text is history too: put its write_batch back as it was.
    previous = importlib.import_module("offsetstore.migrations.versions.0004_write_batch_function")
    op.execute(f"DROP FUNCTION {SCHEMA}.write_batch({_WRITE_BATCH_ARGS})")
    op.execute(previous.WRITE_BATCH)
    op.execute(f"DROP FUNCTION {SCHEMA}.lock_group(text, boolean)")
    op.execute(f"DROP FUNCTION {SCHEMA}.stale_generation(bigint, bigint)")
