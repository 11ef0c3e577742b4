-- engram-memory store, version 1.
-- Nothing here holds plaintext memory content: bodies are sealed (AES-256-GCM), lexical terms
-- are keyed hashes, principals and idempotency keys are one-way digests. The wrapped item keys
-- live outside this file (crypto/keystore.py) so that destroying one removes its bytes.

CREATE TABLE journal_events (
    scope_ref           VARCHAR NOT NULL,
    cursor              UBIGINT NOT NULL,       -- dense per scope, from 1
    event_id            VARCHAR NOT NULL,       -- capture:/admission:/withdraw:<candidate_id>, tombstone:<record_id>
    operation           VARCHAR NOT NULL,
    target_id           VARCHAR NOT NULL,
    event_json          VARCHAR NOT NULL,       -- JCS of the event minus event_hash
    previous_event_hash VARCHAR NOT NULL,
    event_hash          VARCHAR NOT NULL,       -- D("memory-journal-event", event minus event_hash)
    intent_digest       VARCHAR NOT NULL,       -- D("memory-journal-intent", event minus cursor and hashes)
    PRIMARY KEY (scope_ref, cursor),
    UNIQUE (scope_ref, event_id)
);

CREATE TABLE candidates (
    scope_ref           VARCHAR NOT NULL,
    candidate_id        VARCHAR NOT NULL,
    state               VARCHAR NOT NULL,       -- pending | rejected | withdrawn | promoted
    principal_ref       VARCHAR NOT NULL,
    payload_digest      VARCHAR NOT NULL,
    guard_digest        VARCHAR NOT NULL,
    record_digest       VARCHAR NOT NULL,
    record_id           VARCHAR NOT NULL,       -- the future record's id (never disclosed before acceptance)
    capture_cursor      UBIGINT NOT NULL,
    sealed_body         BLOB NOT NULL,          -- sealed envelope under the candidate's item key
    created_at_ms       BIGINT NOT NULL,
    updated_at_ms       BIGINT NOT NULL,
    PRIMARY KEY (scope_ref, candidate_id)
);

CREATE TABLE records (
    scope_ref           VARCHAR NOT NULL,
    record_id           VARCHAR NOT NULL,
    candidate_id        VARCHAR NOT NULL,
    state               VARCHAR NOT NULL,       -- accepted_current | ... | tombstoned
    record_digest       VARCHAR NOT NULL,
    payload_digest      VARCHAR NOT NULL,
    guard_digest        VARCHAR NOT NULL,       -- kept after tombstone for the forgotten-content guard
    recorded_cursor     UBIGINT NOT NULL,
    accept_cursor       UBIGINT NOT NULL,
    valid_t             BIGINT NOT NULL,
    valid_t_end         BIGINT,
    expires_at_ms       BIGINT,
    sealed_body         BLOB,                   -- NULL once tombstoned
    updated_at_ms       BIGINT NOT NULL,
    PRIMARY KEY (scope_ref, record_id)
);

CREATE TABLE lexical_documents (
    scope_ref           VARCHAR NOT NULL,
    record_id           VARCHAR NOT NULL,
    field_lengths_json  VARCHAR NOT NULL,       -- {"primary": n, ...} token counts
    valid_t_end         BIGINT,
    PRIMARY KEY (scope_ref, record_id)
);

CREATE TABLE lexical_postings (
    scope_ref           VARCHAR NOT NULL,
    term_hash           VARCHAR NOT NULL,       -- HMAC of the token under the scope's index key
    record_id           VARCHAR NOT NULL,
    field               VARCHAR NOT NULL,
    tf                  INTEGER NOT NULL
);
CREATE INDEX lexical_postings_term ON lexical_postings (scope_ref, term_hash);

CREATE TABLE idempotency (
    scope_ref           VARCHAR NOT NULL,
    principal_ref       VARCHAR NOT NULL,
    key_digest          VARCHAR NOT NULL,       -- one-way digest of the idempotency key
    tool                VARCHAR NOT NULL,
    operation_digest    VARCHAR NOT NULL,
    state               VARCHAR NOT NULL,       -- completed (reservations never outlive the call's transaction)
    result_json         VARCHAR NOT NULL,       -- the first result's output value, JCS
    created_at_ms       BIGINT NOT NULL,
    PRIMARY KEY (scope_ref, principal_ref, key_digest)
);

CREATE TABLE consumed_confirmations (
    jti                 VARCHAR PRIMARY KEY,
    scope_ref           VARCHAR NOT NULL,
    tool                VARCHAR NOT NULL,
    consumed_at_ms      BIGINT NOT NULL
);

CREATE TABLE decision_receipts (
    decision_id         VARCHAR PRIMARY KEY,
    audit_id            VARCHAR NOT NULL,
    scope_ref           VARCHAR NOT NULL,
    policy_path         VARCHAR NOT NULL,
    input_digest        VARCHAR NOT NULL,
    result_digest       VARCHAR NOT NULL,
    bundle_revision     VARCHAR NOT NULL,
    bundle_digest       VARCHAR NOT NULL,
    engine_id           VARCHAR NOT NULL,
    engine_version      VARCHAR NOT NULL,
    reasons_json        VARCHAR NOT NULL,
    decided_at_ms       BIGINT NOT NULL,
    receipt_digest      VARCHAR NOT NULL        -- D("policy-decision", receipt minus receipt_digest)
);

CREATE TABLE audit_entries (
    sequence            UBIGINT PRIMARY KEY,    -- global, dense from 1
    recorded_at         VARCHAR NOT NULL,       -- Instant (UTC, ms)
    audit_id            VARCHAR NOT NULL,
    scope_ref           VARCHAR NOT NULL,
    principal_ref       VARCHAR NOT NULL,
    agent_ref           VARCHAR NOT NULL,
    session_ref         VARCHAR NOT NULL,
    tool                VARCHAR NOT NULL,
    outcome             VARCHAR NOT NULL,       -- ok | <error code> | rpc:<json-rpc code>
    target_ids_json     VARCHAR NOT NULL,
    receipt_digests_json VARCHAR NOT NULL,
    bundle_digest       VARCHAR NOT NULL,
    bundle_revision     VARCHAR NOT NULL,
    idempotency_key_digest VARCHAR NOT NULL,    -- '' when the tool takes no key
    detail              VARCHAR NOT NULL,       -- sanitized operator note, never content
    previous_hash       VARCHAR NOT NULL,
    entry_hash          VARCHAR NOT NULL        -- D("audit-entry", entry minus entry_hash)
);
