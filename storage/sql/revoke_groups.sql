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
