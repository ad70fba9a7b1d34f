-- The group id rule of storage/validate.py (group_id), in SQL for the SQL API: not NULL,
-- not empty, at most 255 bytes (PostgreSQL text holds no NUL, the other half of that rule).
CREATE OR REPLACE FUNCTION offsetstore.api_check_group(p_group text)
RETURNS void
LANGUAGE plpgsql IMMUTABLE AS $fn$
BEGIN
    IF p_group IS NULL OR p_group = '' THEN
        PERFORM offsetstore.api_invalid('group_id', 'must not be empty');
    ELSIF octet_length(p_group) > 255 THEN
        PERFORM offsetstore.api_invalid('group_id', 'must be at most 255 bytes');
    END IF;
END
$fn$;
