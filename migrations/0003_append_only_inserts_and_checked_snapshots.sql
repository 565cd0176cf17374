-- Issue 8: close the INSERT hole in append-only, and tie snapshots to the hash chain.

-- INSERT OR REPLACE deletes a conflicting row without firing the DELETE trigger (recursive triggers are off), so
-- it could rewrite any row. Every insert must take the next seq: one at or below the end (a rewrite) or beyond
-- end + 1 (a gap) is refused. An insert without an explicit seq (NEW.seq is -1 in a BEFORE trigger) is refused
-- too; admitd always names the seq.
CREATE TRIGGER events_are_append_only_next_seq_only BEFORE INSERT ON events
WHEN NEW.seq IS NOT (SELECT coalesce(max(seq), 0) + 1 FROM events)
BEGIN
    SELECT RAISE(ABORT, 'admitd: the event log is append-only; an insert must take the next seq');
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
