"""The SQL API's history budget per role (issue 47, M1): ``commit_offsets`` appends history within a budget.

Before, a role under ``set_quotas`` (5 groups, 1,000 partitions) appended 10,600 history rows a
second from one session, kept for the history's retention; the server's
``--principal-history-rows-per-second`` did not reach the database. Now a role's row in
``offsetstore.sql_quotas`` carries ``history_rows_per_second`` (1,000 for every row, those there
before included, as the server's default; ``offsetstore.set_history_budget`` sets it, 0 is none),
and ``commit_offsets`` charges each call's partitions to it over a 10 s window
(``offsetstore.sql_history_charges``): past it, OS004 with reason ``history_rows_per_second``
and ``retry_after_ms`` in its DETAIL, before anything is written.

The function texts below are frozen copies of ``storage/sql/*.sql`` as of this revision
(tests/storage/test_sql_functions.py fails when they drift); downgrade() puts 0011's back.
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

# Alembic reads these four names.
revision: str = "0012"
down_revision: str | Sequence[str] | None = "0011"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

SCHEMA = "offsetstore"

API_CHECK_HISTORY = """\
-- The SQL API's history budget (docs/sql.md; issue 47): a role whose row in sql_quotas has
-- history_rows_per_second > 0 may have charged at most 10 s of it in the last 10 s, else OS004
-- (reason history_rows_per_second) with the milliseconds until it may retry, before anything is
-- written; then the call is charged p_rows. As the server's budget, a call may overdraw it.
-- Charges are rows of sql_history_charges, appended in the caller's transaction (a commit that
-- fails charges nothing; concurrent transactions of a role do not wait for each other, and may
-- overshoot by what they charge at once); each call removes up to 64 of the role's expired ones
-- that no one else holds, so the table keeps about one window. admin on '' has no budget.
CREATE OR REPLACE FUNCTION offsetstore.api_check_history(p_rows integer)
RETURNS void
LANGUAGE plpgsql AS $fn$
DECLARE
    rate integer;
    used bigint;
    freed timestamptz;
BEGIN
    SELECT s.history_rows_per_second INTO rate FROM offsetstore.sql_quotas AS s WHERE s.role = session_user::text;
    IF coalesce(rate, 0) = 0 OR EXISTS (
        SELECT FROM offsetstore.sql_grants AS g
        WHERE g.role = session_user::text AND g.group_prefix = '' AND g.access = 'admin'
    ) THEN
        RETURN;
    END IF;
    DELETE FROM offsetstore.sql_history_charges AS c WHERE c.ctid = ANY (ARRAY(
        SELECT o.ctid FROM offsetstore.sql_history_charges AS o
        WHERE o.role = session_user::text AND o.charged_at <= statement_timestamp() - interval '10 s'
        LIMIT 64 FOR UPDATE SKIP LOCKED
    ));
    SELECT coalesce(sum(c.rows), 0) INTO used FROM offsetstore.sql_history_charges AS c
    WHERE c.role = session_user::text AND c.charged_at > statement_timestamp() - interval '10 s';
    IF used >= rate * 10 THEN
        -- When enough of the window's charges will have left it: the oldest that brings it below.
        SELECT w.charged_at INTO freed FROM (
            SELECT c.charged_at, sum(c.rows) OVER (ORDER BY c.charged_at) AS gone
            FROM offsetstore.sql_history_charges AS c
            WHERE c.role = session_user::text AND c.charged_at > statement_timestamp() - interval '10 s'
        ) AS w WHERE used - w.gone < rate * 10 ORDER BY w.charged_at LIMIT 1;
        RAISE EXCEPTION USING ERRCODE = 'OS004',
            MESSAGE = 'quota exceeded for role ' || session_user || ': history_rows_per_second',
            DETAIL = 'history_rows_per_second ' || rate || ', rows in the last 10 s ' || used || ', retry_after_ms '
                || greatest(1, ceil(1000 * extract(epoch FROM freed + interval '10 s' - statement_timestamp())))::bigint,
            HINT = 'retry after retry_after_ms, or ask the store''s owner for a higher budget '
                '(offsetstore.set_history_budget)';
    END IF;
    INSERT INTO offsetstore.sql_history_charges (role, charged_at, rows)
    VALUES (session_user::text, statement_timestamp(), p_rows);
END
$fn$;
"""

SET_HISTORY_BUDGET = """\
-- The SQL API's history budget, for the schema's owner (docs/sql.md): how many history rows a
-- second role_name's commits may append, over bursts of 10 s, as the server's
-- --principal-history-rows-per-second for a principal under a quota (0: no budget). A role's
-- row in sql_quotas starts with 1,000, the server's default; one is made (no quotas) if missing.
CREATE OR REPLACE FUNCTION offsetstore.set_history_budget(role_name text, rows_per_second integer)
RETURNS void
LANGUAGE plpgsql AS $fn$
BEGIN
    IF NOT EXISTS (SELECT FROM pg_catalog.pg_roles AS r WHERE r.rolname = set_history_budget.role_name) THEN
        PERFORM offsetstore.api_invalid('role_name', 'no such role');
    ELSIF set_history_budget.rows_per_second IS NULL OR set_history_budget.rows_per_second < 0 THEN
        PERFORM offsetstore.api_invalid('rows_per_second', 'must be >= 0 (0 = no budget)');
    END IF;
    INSERT INTO offsetstore.sql_quotas AS q (role, history_rows_per_second)
    VALUES (set_history_budget.role_name, set_history_budget.rows_per_second)
    ON CONFLICT ON CONSTRAINT pk_sql_quotas
    DO UPDATE SET history_rows_per_second = excluded.history_rows_per_second;
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

#: (name, identity arguments) of what this revision adds, callees first: internal, or the owner's.
_ADDED = (
    ("api_check_history", "integer"),
    ("set_history_budget", "text, integer"),
)


def upgrade() -> None:
    op.add_column(
        "sql_quotas",
        sa.Column("history_rows_per_second", sa.Integer(), server_default="1000", nullable=False),
        schema=SCHEMA,
    )
    op.create_check_constraint(
        op.f("ck_sql_quotas_history_budget_non_negative"), "sql_quotas", "history_rows_per_second >= 0", schema=SCHEMA
    )
    op.create_table(
        "sql_history_charges",
        sa.Column("role", sa.Text(), nullable=False),
        sa.Column("charged_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("rows", sa.Integer(), nullable=False),
        schema=SCHEMA,
    )
    op.create_index(
        op.f("ix_sql_history_charges_role_charged_at"), "sql_history_charges", ["role", "charged_at"], schema=SCHEMA
    )
    for text in (API_CHECK_HISTORY, SET_HISTORY_BUDGET, COMMIT_OFFSETS):
        op.execute(text)
    # PostgreSQL grants EXECUTE to PUBLIC on every new function: only the owner runs these.
    for name, args in _ADDED:
        op.execute(f"REVOKE EXECUTE ON FUNCTION {SCHEMA}.{name}({args}) FROM PUBLIC")


def downgrade() -> None:
    previous = importlib.import_module("offsetstore.migrations.versions.0011_sql_grants")
    op.execute(previous.COMMIT_OFFSETS)
    for name, args in reversed(_ADDED):
        op.execute(f"DROP FUNCTION {SCHEMA}.{name}({args})")
    op.drop_table("sql_history_charges", schema=SCHEMA)
    op.drop_column("sql_quotas", "history_rows_per_second", schema=SCHEMA)
