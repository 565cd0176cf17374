-- Snapshots of the replayed state at a seq. Only an accelerator: deleting them all changes nothing but start-up time.
CREATE TABLE snapshots (
    seq           INTEGER PRIMARY KEY,     -- the state includes every event up to and including this seq
    event_hash    BLOB    NOT NULL,        -- hash of event seq; a snapshot whose event no longer matches is ignored
    state_version INTEGER NOT NULL,        -- shape of the body; a snapshot of another shape is ignored
    created_at    INTEGER NOT NULL,
    body          BLOB    NOT NULL
);
