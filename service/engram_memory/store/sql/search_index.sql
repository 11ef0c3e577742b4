-- Reads that rebuild the in-process search index (core/search_index.py) at open.

-- name: indexed_records
-- Slots are assigned in this order: by accept cursor within each scope.
SELECT r.scope_ref, r.record_id, r.state, r.accept_cursor, r.recorded_cursor, r.valid_t,
       r.valid_t_end, r.expires_at_ms, d.field_lengths_json
FROM records r JOIN lexical_documents d USING (scope_ref, record_id)
ORDER BY r.scope_ref, r.accept_cursor, r.record_id;

-- name: packed_postings
-- One scope's postings grouped by term, each packed as (slot << $2) | (field << $3) | tf with
-- the slot numbering of `indexed_records`, a document's postings in field order.
WITH slots AS (
    SELECT r.record_id, row_number() OVER (ORDER BY r.accept_cursor, r.record_id) - 1 AS slot
    FROM records r JOIN lexical_documents d USING (scope_ref, record_id)
    WHERE r.scope_ref = $1
), fields AS (
    SELECT * FROM (VALUES ('primary', 0), ('decision', 1), ('evidence', 2), ('context', 3),
                          ('citations', 4)) AS f(field, field_index)
)
SELECT p.term_hash,
       list((s.slot << $2) | (f.field_index::BIGINT << $3) | p.tf::BIGINT
            ORDER BY s.slot, f.field_index)
FROM lexical_postings p JOIN slots s USING (record_id) JOIN fields f USING (field)
WHERE p.scope_ref = $1
GROUP BY p.term_hash;
