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
