-- A Kafka cluster id as the SQL API takes it (issue 58): not NULL, not empty, at most 255 bytes
-- (storage/resets.py's MAX_CLUSTER_ID_BYTES), no control character (it is shown in one-line errors).
CREATE OR REPLACE FUNCTION offsetstore.api_check_cluster(p_cluster text)
RETURNS void
LANGUAGE plpgsql IMMUTABLE AS $fn$
BEGIN
    IF p_cluster IS NULL OR p_cluster = '' THEN
        PERFORM offsetstore.api_invalid('cluster_id', 'must not be empty');
    ELSIF octet_length(p_cluster) > 255 THEN
        PERFORM offsetstore.api_invalid('cluster_id', 'must be at most 255 bytes');
    ELSIF p_cluster ~ '[[:cntrl:]]' THEN
        PERFORM offsetstore.api_invalid('cluster_id', 'must not contain control characters');
    END IF;
END
$fn$;
