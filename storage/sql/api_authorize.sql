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
