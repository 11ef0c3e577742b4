-- The host-level audit stream and counted refusal summaries (issue 9): rows of the same
-- chain. Each column's default is the value an entry without it had; store/audit.py hashes a
-- column only when it differs from its default, so every older entry re-derives unchanged.
ALTER TABLE audit_entries ADD COLUMN transport VARCHAR NOT NULL DEFAULT '';    -- stdio | http | maintenance
ALTER TABLE audit_entries ADD COLUMN peer VARCHAR NOT NULL DEFAULT '';         -- client IP, 'stdio', uid
ALTER TABLE audit_entries ADD COLUMN reason VARCHAR NOT NULL DEFAULT '';       -- core/host_audit.py RefusalReason
ALTER TABLE audit_entries ADD COLUMN token_digest VARCHAR NOT NULL DEFAULT ''; -- sha256 of the presented token
ALTER TABLE audit_entries ADD COLUMN occurrences UBIGINT NOT NULL DEFAULT 1;   -- a summary counts several refusals
ALTER TABLE audit_entries ADD COLUMN first_at VARCHAR NOT NULL DEFAULT '';     -- a summary's first refusal
ALTER TABLE audit_entries ADD COLUMN last_at VARCHAR NOT NULL DEFAULT '';      -- a summary's last refusal

-- Every audit id an invocation token bound, until that token expires: written in the
-- transaction of the entry that used it, so a token is single-use across restarts too.
CREATE TABLE used_audit_ids (
    audit_id      VARCHAR PRIMARY KEY,
    expires_at_ms BIGINT NOT NULL
);
