-- Reads that rebuild the in-process search index (core/search_index.py) at open, as columns.

-- name: indexed_scopes
SELECT DISTINCT scope_ref FROM lexical_documents ORDER BY scope_ref;

-- name: indexed_records
-- One scope's indexed records; their slots are assigned in this order (accept cursor). An
-- open end or expiry reads as the largest BIGINT (`OPEN` of search/scope_index.py).
SELECT r.record_id, r.state = 'accepted_current' AS current, r.accept_cursor::BIGINT AS accept,
       r.recorded_cursor::BIGINT AS recorded, r.valid_t,
       coalesce(r.valid_t_end, 9223372036854775807) AS valid_end,
       coalesce(r.expires_at_ms, 9223372036854775807) AS expires,
       coalesce(json_extract_string(d.field_lengths_json, '$.primary')::BIGINT, 0) AS l0,
       coalesce(json_extract_string(d.field_lengths_json, '$.decision')::BIGINT, 0) AS l1,
       coalesce(json_extract_string(d.field_lengths_json, '$.evidence')::BIGINT, 0) AS l2,
       coalesce(json_extract_string(d.field_lengths_json, '$.context')::BIGINT, 0) AS l3,
       coalesce(json_extract_string(d.field_lengths_json, '$.citations')::BIGINT, 0) AS l4
FROM records r JOIN lexical_documents d USING (scope_ref, record_id)
WHERE r.scope_ref = $1
ORDER BY r.accept_cursor, r.record_id;

-- name: indexed_postings
-- One scope's postings, each packed as (slot << $2) | (field << $3) | tf with its term's rank
-- among `indexed_terms`; slots are numbered as `indexed_records`. Unordered: the caller sorts
-- the integers (core/search_index.py). Ranking the terms and slots over their small sets and
-- joining integers loads 11.5M postings in ~2 s; a rank window over the postings took 18 s
-- and 3 GB.
WITH slots AS (
    SELECT r.record_id, row_number() OVER (ORDER BY r.accept_cursor, r.record_id) - 1 AS slot
    FROM records r JOIN lexical_documents d USING (scope_ref, record_id)
    WHERE r.scope_ref = $1
), terms AS (
    SELECT term_hash, row_number() OVER (ORDER BY term_hash) - 1 AS term
    FROM (SELECT DISTINCT p.term_hash FROM lexical_postings p JOIN slots s USING (record_id)
          WHERE p.scope_ref = $1)
), fields AS (
    SELECT * FROM (VALUES ('primary', 0), ('decision', 1), ('evidence', 2), ('context', 3),
                          ('citations', 4)) AS f(field, field_index)
)
SELECT t.term::BIGINT AS term,
       (s.slot::BIGINT << $2) | (f.field_index::BIGINT << $3) | p.tf::BIGINT AS packed
FROM lexical_postings p JOIN slots s USING (record_id) JOIN terms t USING (term_hash)
JOIN fields f USING (field)
WHERE p.scope_ref = $1;

-- name: indexed_terms
-- The terms `indexed_postings` ranks, in rank order (the same join, so the same set).
WITH slots AS (
    SELECT r.record_id
    FROM records r JOIN lexical_documents d USING (scope_ref, record_id)
    WHERE r.scope_ref = $1
)
SELECT DISTINCT p.term_hash
FROM lexical_postings p JOIN slots s USING (record_id)
WHERE p.scope_ref = $1
ORDER BY p.term_hash;

-- name: index_fingerprint
-- What the index is read from, summed per scope (a kept index is used only where these are
-- unchanged since it was kept: core/index_keeping.py): the indexed records' columns with
-- their documents, and every posting.
SELECT 'documents' AS part, d.scope_ref, count(*) AS n,
       sum(hash(d.record_id, d.field_lengths_json, r.state, r.accept_cursor, r.recorded_cursor,
                r.valid_t, r.valid_t_end, r.expires_at_ms))::VARCHAR AS digest
FROM lexical_documents d JOIN records r USING (scope_ref, record_id)
GROUP BY d.scope_ref
UNION ALL
SELECT 'postings', scope_ref, count(*), sum(hash(record_id, field, term_hash, tf))::VARCHAR
FROM lexical_postings
GROUP BY scope_ref
ORDER BY 1, 2;
