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
