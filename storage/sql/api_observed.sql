-- OS005, the SQL API's refusal to write an observed group (a pipeline that keeps its own positions).
CREATE OR REPLACE FUNCTION offsetstore.api_observed(p_group text)
RETURNS void
LANGUAGE plpgsql IMMUTABLE AS $fn$
BEGIN
    RAISE EXCEPTION USING ERRCODE = 'OS005',
        MESSAGE = 'group ' || p_group || ' is observed: its positions are kept by the pipeline, not committed here',
        HINT = 'adopt it first (offsetstore groups adopt GROUP --from-observed), or write under another group id';
END
$fn$;
