-- Signed checkpoints of the chain heads (core/checkpoints.py): each row is one checkpoint
-- document exactly as signed (RFC 8785 JSON with its Ed25519 signature). `audit verify
-- --checkpoint` uses every stored one whose signature verifies to narrow down where a
-- rewritten chain first diverges; rows are never updated (deleting them only loses that help).
CREATE TABLE audit_checkpoints (
    signed_at           VARCHAR NOT NULL,   -- UTC instant, as in the document
    audit_sequence      BIGINT NOT NULL,    -- the checkpointed audit head (0: empty trail)
    key_id              VARCHAR NOT NULL,   -- sha256 of the raw Ed25519 public key
    reason              VARCHAR NOT NULL,   -- interval | export | request
    document_json       VARCHAR NOT NULL
);
