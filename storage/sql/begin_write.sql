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
        ELSIF r.outcome = 3 THEN
            PERFORM offsetstore.api_observed(begin_write.group_id);
        END IF;
        topic := r.topic;
        "partition" := r.partition;
        next_offset := r."offset";
        RETURN NEXT;
    END LOOP;
END
$fn$;
