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
