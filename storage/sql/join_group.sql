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
