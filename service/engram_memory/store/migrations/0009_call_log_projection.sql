-- How far the call log (store/call_log.py) is projected into this file (store/projection.py):
-- every record up to `position` is here. It moves in the transaction that writes those
-- records' rows, so a crash leaves the rows and the position together or neither; at start,
-- every log record after it is replayed before anything is served. One row, always.
CREATE TABLE call_log_projection (
    id          INTEGER PRIMARY KEY CHECK (id = 1),
    position    BIGINT NOT NULL CHECK (position >= 0)
);
INSERT INTO call_log_projection VALUES (1, 0);
