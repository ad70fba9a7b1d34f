"""The SQL API v1 (docs/sql.md): join, begin a write, commit and read offsets from any PostgreSQL driver.

Thin SECURITY DEFINER wrappers over write_batch and lock_for_write, so the commit rule
still exists once; they turn the rule's outcome rows into errors of their own SQLSTATEs
(OS001 stale generation, OS002 offset mismatch, 22023 bad input naming the field), which
abort the caller's transaction with the rows it wrote. EXECUTE on every function of the
schema is revoked from PUBLIC: a consumer's role gets EXECUTE on the four API functions
(docs/sql.md's recipe), the schema's owner (the server, the migrations) keeps all of it.

The function texts below are frozen copies of ``storage/sql/*.sql`` as of this revision
(tests/storage/test_sql_functions.py fails when they drift).
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

# Alembic reads these four names.
revision: str = "0009"
down_revision: str | Sequence[str] | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

SCHEMA = "offsetstore"

API_INVALID = """\
-- The SQL API's bad-input error, one shape for every field: 22023 (invalid_parameter_value),
-- the field named first in MESSAGE and alone in COLUMN, so drivers can branch and show it.
CREATE OR REPLACE FUNCTION offsetstore.api_invalid(field text, description text)
RETURNS void
LANGUAGE plpgsql IMMUTABLE AS $fn$
BEGIN
    RAISE EXCEPTION USING ERRCODE = 'invalid_parameter_value', MESSAGE = field || ': ' || description,
        COLUMN = field;
END
$fn$;
"""


API_CHECK_GROUP = """\
-- The group id rule of storage/validate.py (group_id), in SQL for the SQL API: not NULL,
-- not empty, at most 255 bytes (PostgreSQL text holds no NUL, the other half of that rule).
CREATE OR REPLACE FUNCTION offsetstore.api_check_group(p_group text)
RETURNS void
LANGUAGE plpgsql IMMUTABLE AS $fn$
BEGIN
    IF p_group IS NULL OR p_group = '' THEN
        PERFORM offsetstore.api_invalid('group_id', 'must not be empty');
    ELSIF octet_length(p_group) > 255 THEN
        PERFORM offsetstore.api_invalid('group_id', 'must be at most 255 bytes');
    END IF;
END
$fn$;
"""


API_CHECK_GENERATION = """\
-- The generation rule of storage/validate.py: not NULL, >= 0 (0 = unfenced).
CREATE OR REPLACE FUNCTION offsetstore.api_check_generation(p_generation bigint)
RETURNS void
LANGUAGE plpgsql IMMUTABLE AS $fn$
BEGIN
    IF p_generation IS NULL OR p_generation < 0 THEN
        PERFORM offsetstore.api_invalid('generation', 'must be >= 0 (0 = unfenced)');
    END IF;
END
$fn$;
"""


API_STALE = """\
-- OS001, the SQL API's stale generation: DETAIL is `current generation N`, N its only number.
-- No format(): the drift test runs these texts through a driver that reads its percent signs as placeholders.
CREATE OR REPLACE FUNCTION offsetstore.api_stale(p_group text, p_generation bigint, p_current bigint)
RETURNS void
LANGUAGE plpgsql IMMUTABLE AS $fn$
BEGIN
    RAISE EXCEPTION USING ERRCODE = 'OS001',
        MESSAGE = 'stale generation for group ' || p_group || ': ' || p_generation || ' is not the current generation',
        DETAIL = 'current generation ' || p_current,
        HINT = 'another member joined or an operator reset the group: join again (offsetstore.join_group) and begin again';
END
$fn$;
"""


JOIN_GROUP = """\
-- SQL API v1 (docs/sql.md): join a group; the new generation fences every earlier member.
CREATE OR REPLACE FUNCTION offsetstore.join_group(group_id text, member_id text DEFAULT '', member_host text DEFAULT '')
RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
DECLARE
    gen bigint;
BEGIN
    PERFORM offsetstore.api_check_group(group_id);
    IF octet_length(member_id) > 255 THEN
        PERFORM offsetstore.api_invalid('member_id', 'must be at most 255 bytes');
    ELSIF octet_length(member_host) > 255 THEN
        PERFORM offsetstore.api_invalid('member_host', 'must be at most 255 bytes');
    END IF;
    SELECT w.stored INTO gen
    FROM offsetstore.write_batch(
        ARRAY[true], ARRAY[group_id], ARRAY[0::bigint], ARRAY[''], ARRAY[coalesce(member_id, '')],
        ARRAY[coalesce(member_host, '')], ARRAY[false], ARRAY[1], ARRAY[0],
        '{}'::text[], '{}'::integer[], '{}'::bigint[], '{}'::text[], '{}'::bigint[]
    ) AS w;
    RETURN gen;
END
$fn$;
"""


BEGIN_WRITE = """\
-- SQL API v1 (docs/sql.md): in the caller's transaction, lock the group (creating or reviving
-- it), fence (generation 0 = unfenced; OS001 when stale) and return the stored next offsets:
-- the caller writes only records at or above them. The lock holds until the caller commits.
CREATE OR REPLACE FUNCTION offsetstore.begin_write(group_id text, generation bigint)
RETURNS TABLE (topic text, "partition" integer, next_offset bigint)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
#variable_conflict use_column
DECLARE
    r record;
BEGIN
    PERFORM offsetstore.api_check_group(begin_write.group_id);
    PERFORM offsetstore.api_check_generation(begin_write.generation);
    FOR r IN SELECT * FROM offsetstore.lock_for_write(begin_write.group_id, begin_write.generation) LOOP
        IF r.outcome = 1 THEN
            PERFORM offsetstore.api_stale(begin_write.group_id, begin_write.generation, r.stored);
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
    r record;
BEGIN
    PERFORM offsetstore.api_check_group(commit_offsets.group_id);
    PERFORM offsetstore.api_check_generation(commit_offsets.generation);
    IF topics IS NULL THEN
        PERFORM offsetstore.api_invalid('topics', 'must not be NULL');
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

    FOR r IN SELECT * FROM offsetstore.write_batch(
        ARRAY[false], ARRAY[commit_offsets.group_id], ARRAY[commit_offsets.generation], ARRAY[actor], ARRAY[''],
        ARRAY[''], ARRAY[expected_offsets IS NOT NULL], ARRAY[1], ARRAY[n], coalesce(t, '{}'), coalesce(p, '{}'),
        coalesce(o, '{}'), array_fill(''::text, ARRAY[n]), coalesce(e, '{}')
    ) LOOP
        IF r.outcome = 1 THEN
            PERFORM offsetstore.api_stale(commit_offsets.group_id, commit_offsets.generation, r.stored);
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


READ_OFFSETS = """\
-- SQL API v1 (docs/sql.md): the group's stored next offsets, without locking anything.
CREATE OR REPLACE FUNCTION offsetstore.read_offsets(group_id text)
RETURNS TABLE (topic text, "partition" integer, next_offset bigint, metadata text, commit_time timestamptz)
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
#variable_conflict use_column
BEGIN
    PERFORM offsetstore.api_check_group(read_offsets.group_id);
    RETURN QUERY
    SELECT o.topic, o.partition, o."offset", o.metadata, o.commit_time
    FROM offsetstore.offsets AS o WHERE o.group_id = read_offsets.group_id
    ORDER BY o.topic, o.partition;
END
$fn$;
"""


#: (name, identity arguments) of what this revision adds, callees first.
_ADDED = (
    ("api_invalid", "text, text"),
    ("api_check_group", "text"),
    ("api_check_generation", "bigint"),
    ("api_stale", "text, bigint, bigint"),
    ("join_group", "text, text, text"),
    ("begin_write", "text, bigint"),
    ("commit_offsets", "text, bigint, text[], integer[], bigint[], bigint[], text"),
    ("read_offsets", "text"),
)

#: The rule's functions from 0004 and 0008: internal, so no longer executable by PUBLIC.
_INTERNAL = (
    ("stale_generation", "bigint, bigint"),
    ("lock_group", "text, boolean"),
    ("lock_for_write", "text, bigint"),
    (
        "write_batch",
        "boolean[], text[], bigint[], text[], text[], text[], boolean[], integer[], integer[], "
        "text[], integer[], bigint[], text[], bigint[]",
    ),
)


def upgrade() -> None:
    for text in (
        API_INVALID,
        API_CHECK_GROUP,
        API_CHECK_GENERATION,
        API_STALE,
        JOIN_GROUP,
        BEGIN_WRITE,
        COMMIT_OFFSETS,
        READ_OFFSETS,
    ):
        op.execute(text)
    # PostgreSQL grants EXECUTE to PUBLIC on every new function; here nobody but the owner
    # runs anything until docs/sql.md's GRANTs say so.
    for name, args in _ADDED + _INTERNAL:
        op.execute(f"REVOKE EXECUTE ON FUNCTION {SCHEMA}.{name}({args}) FROM PUBLIC")


def downgrade() -> None:
    for name, args in _INTERNAL:
        op.execute(f"GRANT EXECUTE ON FUNCTION {SCHEMA}.{name}({args}) TO PUBLIC")
    for name, args in reversed(_ADDED):
        op.execute(f"DROP FUNCTION {SCHEMA}.{name}({args})")
