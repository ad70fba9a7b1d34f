"""SQL API grants: a database role reads or writes only the groups its grants cover (issue 34, finding 4).

Before, any role with docs/sql.md's EXECUTE grants read every group's offsets, overwrote and
fenced any group, named any actor in the history and had no quota. Now the role that logged
in (``session_user``) needs a grant in ``offsetstore.sql_grants`` (read, commit or admin on a
group-id prefix, as a tokens file grants a principal) or gets OS003, and its row in
``offsetstore.sql_quotas`` bounds its groups and partitions (OS004); members of the schema's
owner are unrestricted. The history's actor of a SQL API commit is the role. commit_offsets'
arrays are bounded before they are walked (22023). The v1 signatures do not change; the
owner manages grants with ``grant_groups``, ``revoke_groups`` and ``set_quotas``.

The function texts below are frozen copies of ``storage/sql/*.sql`` as of this revision
(tests/storage/test_sql_functions.py fails when they drift); downgrade() puts 0009's API back.
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

# Alembic reads these four names.
revision: str = "0011"
down_revision: str | Sequence[str] | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

SCHEMA = "offsetstore"

API_AUTHORIZE = """\
-- The SQL API's grants (docs/sql.md): the role that logged in (session_user: inside the API's
-- SECURITY DEFINER functions current_user is their owner) needs a grant of p_access or more
-- on a prefix of the group, else OS003 before anything is read or written. Members of the
-- schema's owner (the owner, superusers) could write the tables directly: unrestricted, and
-- false says so (true: a grant was needed, and the role's quotas apply).
CREATE OR REPLACE FUNCTION offsetstore.api_authorize(p_group text, p_access text)
RETURNS boolean
LANGUAGE plpgsql STABLE AS $fn$
BEGIN
    IF pg_has_role(session_user, (SELECT n.nspowner FROM pg_namespace AS n WHERE n.nspname = 'offsetstore'), 'MEMBER')
    THEN
        RETURN false;
    END IF;
    -- admin implies commit implies read, as in a tokens file
    IF EXISTS (
        SELECT FROM offsetstore.sql_grants AS g
        WHERE g.role = session_user::text AND starts_with(p_group, g.group_prefix)
            AND array_position(ARRAY['read', 'commit', 'admin'], g.access)
                >= array_position(ARRAY['read', 'commit', 'admin'], p_access)
    ) THEN
        RETURN true;
    END IF;
    RAISE EXCEPTION USING ERRCODE = 'OS003',
        MESSAGE = 'permission denied for group ' || p_group || ': role ' || session_user || ' has no '
            || p_access || ' grant on it',
        DETAIL = 'role ' || session_user || ', access ' || p_access,
        HINT = 'the store''s owner grants a role group prefixes: offsetstore.grant_groups(role_name, group_prefix, access)';
END
$fn$;
"""


API_CHECK_QUOTA = """\
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
"""


GRANT_GROUPS = """\
-- The SQL API's grants, for the schema's owner (docs/sql.md): role_name may read, commit or
-- administer every group whose id starts with group_prefix ('' is every group), as a tokens
-- file's grant does; a role's grants add up, and a new one on the same prefix replaces the old.
-- Not SECURITY DEFINER: only who may write sql_grants (the owner) can call it.
CREATE OR REPLACE FUNCTION offsetstore.grant_groups(role_name text, group_prefix text, access text)
RETURNS void
LANGUAGE plpgsql AS $fn$
BEGIN
    IF NOT EXISTS (SELECT FROM pg_catalog.pg_roles AS r WHERE r.rolname = grant_groups.role_name) THEN
        PERFORM offsetstore.api_invalid('role_name', 'no such role');
    ELSIF grant_groups.group_prefix IS NULL OR octet_length(grant_groups.group_prefix) > 255 THEN
        PERFORM offsetstore.api_invalid('group_prefix', 'must not be NULL and at most 255 bytes');
    ELSIF grant_groups.access IS NULL OR grant_groups.access NOT IN ('read', 'commit', 'admin') THEN
        PERFORM offsetstore.api_invalid('access', 'must be read, commit or admin');
    END IF;
    INSERT INTO offsetstore.sql_grants AS g (role, group_prefix, access)
    VALUES (grant_groups.role_name, grant_groups.group_prefix, grant_groups.access)
    ON CONFLICT ON CONSTRAINT pk_sql_grants DO UPDATE SET access = excluded.access;
END
$fn$;
"""


REVOKE_GROUPS = """\
-- The SQL API's grants, for the schema's owner (docs/sql.md): removes role_name's grant on
-- group_prefix, or all its grants (NULL); returns how many. Revoke before DROP ROLE: a later
-- role of the same name would get them.
CREATE OR REPLACE FUNCTION offsetstore.revoke_groups(role_name text, group_prefix text DEFAULT NULL)
RETURNS integer
LANGUAGE plpgsql AS $fn$
DECLARE
    removed integer;
BEGIN
    DELETE FROM offsetstore.sql_grants AS g
    WHERE g.role = revoke_groups.role_name
        AND (revoke_groups.group_prefix IS NULL OR g.group_prefix = revoke_groups.group_prefix);
    GET DIAGNOSTICS removed = ROW_COUNT;
    RETURN removed;
END
$fn$;
"""


SET_QUOTAS = """\
-- The SQL API's quotas, for the schema's owner (docs/sql.md): a tokens file's max_groups and
-- max_partitions for role_name (0: no quota). The server's --max-*-per-principal flags do not
-- reach the database: a role without a row has no quota.
CREATE OR REPLACE FUNCTION offsetstore.set_quotas(role_name text, max_groups integer, max_partitions integer)
RETURNS void
LANGUAGE plpgsql AS $fn$
BEGIN
    IF NOT EXISTS (SELECT FROM pg_catalog.pg_roles AS r WHERE r.rolname = set_quotas.role_name) THEN
        PERFORM offsetstore.api_invalid('role_name', 'no such role');
    ELSIF set_quotas.max_groups IS NULL OR set_quotas.max_groups < 0 THEN
        PERFORM offsetstore.api_invalid('max_groups', 'must be >= 0 (0 = no quota)');
    ELSIF set_quotas.max_partitions IS NULL OR set_quotas.max_partitions < 0 THEN
        PERFORM offsetstore.api_invalid('max_partitions', 'must be >= 0 (0 = no quota)');
    END IF;
    INSERT INTO offsetstore.sql_quotas AS q (role, max_groups, max_partitions)
    VALUES (set_quotas.role_name, set_quotas.max_groups, set_quotas.max_partitions)
    ON CONFLICT ON CONSTRAINT pk_sql_quotas
    DO UPDATE SET max_groups = excluded.max_groups, max_partitions = excluded.max_partitions;
END
$fn$;
"""


JOIN_GROUP = """\
-- SQL API v1 (docs/sql.md): join a group; the new generation fences every earlier member,
-- so it takes a commit grant on the group (as gRPC's JoinGroup), and may create a group: the quota.
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
    IF offsetstore.api_authorize(group_id, 'commit') THEN
        PERFORM offsetstore.api_check_quota(group_id, '{}', '{}');
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
-- A commit grant on the group, the role's quotas; the history's actor is the role that logged
-- in (session_user), whatever `actor` says (kept, and checked, for v1's signature).
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
    END IF;

    FOR r IN SELECT * FROM offsetstore.write_batch(
        ARRAY[false], ARRAY[commit_offsets.group_id], ARRAY[commit_offsets.generation], ARRAY[session_user::text],
        ARRAY[''], ARRAY[''], ARRAY[expected_offsets IS NOT NULL], ARRAY[1], ARRAY[n], coalesce(t, '{}'),
        coalesce(p, '{}'), coalesce(o, '{}'), array_fill(''::text, ARRAY[n]), coalesce(e, '{}')
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
-- SQL API v1 (docs/sql.md): the group's stored next offsets, without locking anything (a read grant).
CREATE OR REPLACE FUNCTION offsetstore.read_offsets(group_id text)
RETURNS TABLE (topic text, "partition" integer, next_offset bigint, metadata text, commit_time timestamptz)
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
#variable_conflict use_column
BEGIN
    PERFORM offsetstore.api_check_group(read_offsets.group_id);
    PERFORM offsetstore.api_authorize(read_offsets.group_id, 'read');
    RETURN QUERY
    SELECT o.topic, o.partition, o."offset", o.metadata, o.commit_time
    FROM offsetstore.offsets AS o WHERE o.group_id = read_offsets.group_id
    ORDER BY o.topic, o.partition;
END
$fn$;
"""

#: (name, identity arguments) of what this revision adds, callees first: internal, or the owner's.
_ADDED = (
    ("api_authorize", "text, text"),
    ("api_check_quota", "text, text[], integer[]"),
    ("grant_groups", "text, text, text"),
    ("revoke_groups", "text, text"),
    ("set_quotas", "text, integer, integer"),
)


def upgrade() -> None:
    op.create_table(
        "sql_grants",
        sa.Column("role", sa.Text(), nullable=False),
        sa.Column("group_prefix", sa.Text(), nullable=False),
        sa.Column("access", sa.Text(), nullable=False),
        sa.CheckConstraint("access IN ('read', 'commit', 'admin')", name=op.f("ck_sql_grants_access_valid")),
        sa.PrimaryKeyConstraint("role", "group_prefix", name=op.f("pk_sql_grants")),
        schema=SCHEMA,
    )
    op.create_table(
        "sql_quotas",
        sa.Column("role", sa.Text(), nullable=False),
        sa.Column("max_groups", sa.Integer(), server_default="0", nullable=False),
        sa.Column("max_partitions", sa.Integer(), server_default="0", nullable=False),
        sa.CheckConstraint("max_groups >= 0 AND max_partitions >= 0", name=op.f("ck_sql_quotas_quotas_non_negative")),
        sa.PrimaryKeyConstraint("role", name=op.f("pk_sql_quotas")),
        schema=SCHEMA,
    )
    for text in (
        API_AUTHORIZE,
        API_CHECK_QUOTA,
        GRANT_GROUPS,
        REVOKE_GROUPS,
        SET_QUOTAS,
        JOIN_GROUP,
        BEGIN_WRITE,
        COMMIT_OFFSETS,
        READ_OFFSETS,
    ):
        op.execute(text)
    # PostgreSQL grants EXECUTE to PUBLIC on every new function: only the owner runs these.
    for name, args in _ADDED:
        op.execute(f"REVOKE EXECUTE ON FUNCTION {SCHEMA}.{name}({args}) FROM PUBLIC")


def downgrade() -> None:
    # 0009's API is history too (0010 changed only write_batch): put it back as it was.
    previous = importlib.import_module("offsetstore.migrations.versions.0009_sql_api")
    for text in (previous.JOIN_GROUP, previous.BEGIN_WRITE, previous.COMMIT_OFFSETS, previous.READ_OFFSETS):
        op.execute(text)
    for name, args in reversed(_ADDED):
        op.execute(f"DROP FUNCTION {SCHEMA}.{name}({args})")
    op.drop_table("sql_quotas", schema=SCHEMA)
    op.drop_table("sql_grants", schema=SCHEMA)
