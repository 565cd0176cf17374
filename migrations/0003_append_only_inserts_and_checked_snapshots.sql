-- Issue 8: close the INSERT hole in append-only, and tie snapshots to the hash chain.

-- INSERT OR REPLACE deletes a conflicting row without firing the DELETE trigger (recursive triggers are off), so
-- it could rewrite any row. An insert at or below the highest seq ever written (AUTOINCREMENT keeps it in
-- sqlite_sequence) is refused; so is one without an explicit seq (NEW.seq is -1 in a BEFORE trigger) once the log
-- has events. A gap above the end is left to `log verify`, which names it.
-- Cost: any per-row trigger roughly halves SQLite's raw insert rate here; this form (a point read of
-- sqlite_sequence) measured cheapest of those tried; max(seq) of events cost a third more (bench/RESULTS.md).
CREATE TRIGGER events_are_append_only_after_the_end BEFORE INSERT ON events
WHEN NEW.seq <= (SELECT seq FROM sqlite_sequence WHERE name = 'events')
BEGIN
    SELECT RAISE(ABORT, 'admitd: the event log is append-only; an insert at or below the last seq is refused');
END;

-- Snapshots written before this version carry no digest and cannot be checked. They are only an accelerator (a
-- replay without them gives the same state), so they are dropped rather than trusted. The space they held is
-- reused by later writes; `VACUUM` with no writer running gives it back to the file system.
DROP TABLE snapshots;

CREATE TABLE snapshots (
    seq           INTEGER PRIMARY KEY,     -- the state includes every event up to and including this seq
    event_hash    BLOB    NOT NULL,        -- hash of event seq: ties the snapshot to the chain
    state_version INTEGER NOT NULL,        -- shape of the body; a snapshot of another shape is ignored
    created_at    INTEGER NOT NULL,
    body          BLOB    NOT NULL,
    digest        BLOB    NOT NULL         -- sha256 over seq, state_version, event_hash and body (codec.py)
);

CREATE TRIGGER snapshots_are_never_updated BEFORE UPDATE ON snapshots
BEGIN
    SELECT RAISE(ABORT, 'admitd: snapshots are never updated');
END;

-- A snapshot is newer than every kept one and names the hash its event really has.
CREATE TRIGGER snapshots_follow_the_chain BEFORE INSERT ON snapshots
WHEN NEW.seq <= (SELECT coalesce(max(seq), 0) FROM snapshots)
  OR NEW.event_hash IS NOT (SELECT hash FROM events WHERE seq = NEW.seq)
BEGIN
    SELECT RAISE(ABORT, 'admitd: a snapshot must be newer than the newest kept one and carry its event''s hash');
END;

-- The writer keeps the newest 3 (daemon/eventlog/store.py SNAPSHOTS_KEPT) and prunes older ones in the same
-- transaction as each new one; nothing can delete one of the newest 3.
CREATE TRIGGER snapshots_keep_the_newest_three BEFORE DELETE ON snapshots
WHEN OLD.seq >= (SELECT min(seq) FROM (SELECT seq FROM snapshots ORDER BY seq DESC LIMIT 3))
BEGIN
    SELECT RAISE(ABORT, 'admitd: the newest 3 snapshots are kept; only older ones may be deleted');
END;
