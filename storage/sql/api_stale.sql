-- OS001, the SQL API's stale generation: DETAIL is `current generation N`, N its only number.
-- No format(): the drift test runs these texts through a driver that reads its percent signs as placeholders.
CREATE OR REPLACE FUNCTION offsetstore.api_stale(p_group text, p_generation bigint, p_current bigint)
RETURNS void
LANGUAGE plpgsql IMMUTABLE AS $fn$
BEGIN
    RAISE EXCEPTION USING ERRCODE = 'OS001',
        MESSAGE = 'stale generation for group ' || p_group || ': ' || p_generation || ' is not the current generation',
        DETAIL = 'current generation ' || p_current,
        HINT = 'another member joined or an operator reset the group: join again (offsetstore.join_group) and begin again';
END
$fn$;
