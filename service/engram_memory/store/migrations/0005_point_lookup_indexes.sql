-- Point lookups served by an index. DuckDB scans an ART index only for a single equality on
-- one indexed column (composite primary keys are checked on insert but never scanned), so
-- each lookup filters on one selective column here and checks the rest of its key in code.
CREATE INDEX idempotency_key_digest ON idempotency (key_digest);
CREATE INDEX journal_events_event_id ON journal_events (event_id);
CREATE INDEX candidates_candidate_id ON candidates (candidate_id);
CREATE INDEX records_record_id ON records (record_id);
-- Never scanned for the same reason (search reads postings by a term list), and maintaining
-- it tripled the cost of writing a large record's postings.
DROP INDEX lexical_postings_term;
