-- For writers that decide under the lock what to write (the sinks): a commit of no offsets
-- through write_batch (lock, create or revive, fence), then the group's stored offsets.
-- Outcomes as write_batch's: 0 one row per stored offset (`offset`), 1 stale generation
-- (one row, `stored` the current generation), 3 the group is observed (one row).
CREATE OR REPLACE FUNCTION offsetstore.lock_for_write(p_group text, p_generation bigint)
RETURNS TABLE (outcome smallint, topic text, "partition" integer, "offset" bigint, stored bigint)
LANGUAGE plpgsql AS $fn$
#variable_conflict use_column
BEGIN
    RETURN QUERY
    SELECT w.outcome, NULL::text, NULL::integer, NULL::bigint, w.stored
    FROM offsetstore.write_batch(
        ARRAY[false], ARRAY[p_group], ARRAY[p_generation], ARRAY[''], ARRAY[''], ARRAY[''], ARRAY[false],
        ARRAY[1], ARRAY[0], '{}'::text[], '{}'::integer[], '{}'::bigint[], '{}'::text[], '{}'::bigint[]
    ) AS w;
    IF FOUND THEN  -- an empty commit has a row only when refused
        RETURN;
    END IF;
    RETURN QUERY
    SELECT 0::smallint, o.topic, o.partition, o."offset", NULL::bigint
    FROM offsetstore.offsets AS o WHERE o.group_id = p_group;
END
$fn$;
