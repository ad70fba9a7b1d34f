-- The fence: a writer's generation is stale unless it is 0 (unfenced) or the group's current one.
CREATE OR REPLACE FUNCTION offsetstore.stale_generation(requested bigint, current_generation bigint)
RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $fn$
    SELECT requested <> 0 AND requested <> current_generation
$fn$;
