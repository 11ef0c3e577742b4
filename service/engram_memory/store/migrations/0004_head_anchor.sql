-- Once a store has been anchored (store/anchors.py), a missing anchor file is a loss, not a
-- first start: this row says the store was anchored. Before it exists, the first start of a
-- store that predates anchors creates the anchor from the store's own heads.
CREATE TABLE head_anchor_marker (
    anchored_at_ms      BIGINT NOT NULL
);
