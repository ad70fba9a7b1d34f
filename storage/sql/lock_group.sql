-- Every write to a group locks its row first; with p_create, a group never seen gets one.
-- generation is NULL for a group that has no row (and was not created). `created` lets a
-- caller that refuses the request remove the row again: a refusal leaves no trace.
CREATE OR REPLACE FUNCTION offsetstore.lock_group(
    p_group text, p_create boolean, OUT generation bigint, OUT deleted_at timestamptz, OUT created boolean
)
LANGUAGE plpgsql AS $fn$
BEGIN
    created := false;
    -- NO KEY UPDATE: conflicts with every other writer of the group, not with readers.
    SELECT g.generation, g.deleted_at INTO generation, deleted_at
    FROM offsetstore.groups AS g WHERE g.group_id = p_group FOR NO KEY UPDATE;
    IF FOUND OR NOT p_create THEN
        RETURN;
    END IF;
    -- A concurrent first write may insert it first: then lock the row it made.
    INSERT INTO offsetstore.groups AS g (group_id) VALUES (p_group) ON CONFLICT DO NOTHING;
    created := FOUND;
    SELECT g.generation, g.deleted_at INTO generation, deleted_at
    FROM offsetstore.groups AS g WHERE g.group_id = p_group FOR NO KEY UPDATE;
END
$fn$;
