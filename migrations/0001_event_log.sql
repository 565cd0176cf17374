-- The append-only event log, its tamper-evident hash chain, and the guards that keep it append-only.
-- seq is the rowid: global order, never reused (AUTOINCREMENT), so a deleted tail cannot be silently refilled.
CREATE TABLE events (
    seq         INTEGER PRIMARY KEY AUTOINCREMENT,
    recorded_at INTEGER NOT NULL,          -- milliseconds since the epoch (virtual milliseconds in simulations)
    type        TEXT    NOT NULL,          -- stable dotted name, e.g. job.observed
    version     INTEGER NOT NULL,          -- payload schema version of that type
    subject     TEXT    NOT NULL,          -- what it is about, e.g. job/research/train-a
    payload     BLOB    NOT NULL,          -- canonical JSON (sorted keys, no spaces)
    cause       INTEGER,                   -- seq of the event this one reacted to
    hash        BLOB    NOT NULL           -- sha256(previous hash || canonical bytes of this row)
);
CREATE INDEX events_by_subject ON events (subject, seq);

CREATE TRIGGER events_are_append_only_no_update BEFORE UPDATE ON events
BEGIN
    SELECT RAISE(ABORT, 'admitd: the event log is append-only; UPDATE on events is refused');
END;

CREATE TRIGGER events_are_append_only_no_delete BEFORE DELETE ON events
BEGIN
    SELECT RAISE(ABORT, 'admitd: the event log is append-only; DELETE on events is refused');
END;
