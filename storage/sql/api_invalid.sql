-- The SQL API's bad-input error, one shape for every field: 22023 (invalid_parameter_value),
-- the field named first in MESSAGE and alone in COLUMN, so drivers can branch and show it.
CREATE OR REPLACE FUNCTION offsetstore.api_invalid(field text, description text)
RETURNS void
LANGUAGE plpgsql IMMUTABLE AS $fn$
BEGIN
    RAISE EXCEPTION USING ERRCODE = 'invalid_parameter_value', MESSAGE = field || ': ' || description,
        COLUMN = field;
END
$fn$;
