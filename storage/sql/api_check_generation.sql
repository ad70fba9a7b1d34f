-- The generation rule of storage/validate.py: not NULL, >= 0 (0 = unfenced).
CREATE OR REPLACE FUNCTION offsetstore.api_check_generation(p_generation bigint)
RETURNS void
LANGUAGE plpgsql IMMUTABLE AS $fn$
BEGIN
    IF p_generation IS NULL OR p_generation < 0 THEN
        PERFORM offsetstore.api_invalid('generation', 'must be >= 0 (0 = unfenced)');
    END IF;
END
$fn$;
