-- Who approved is evidence (issue 9 item 4): the host confirmation that released a confirmed
-- call's gate, on that call's audit entry. NULL on every other entry; an entry's hash covers
-- these columns only when they are set, so entries written before them re-derive unchanged.
ALTER TABLE audit_entries ADD COLUMN approver VARCHAR;                  -- human:<subject>
ALTER TABLE audit_entries ADD COLUMN confirmation_jti VARCHAR;          -- single-use id, spent here
ALTER TABLE audit_entries ADD COLUMN confirmation_issued_at BIGINT;     -- iat, epoch seconds
ALTER TABLE audit_entries ADD COLUMN confirmation_resolved_at BIGINT;   -- when the human answered
ALTER TABLE audit_entries ADD COLUMN confirmation_op_digest VARCHAR;    -- D("tool-operation", call)
