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
