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
