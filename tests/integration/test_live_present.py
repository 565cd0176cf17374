"""Who is writing a log (`daemon.eventlog.store.writer_pid`), which decides the read side's present: now on a log a
daemon writes, the last event on one nobody writes (test_served_answers_daemon.py checks the answers themselves).

Real: an EventStore holding its writer's flock, the kernel's /proc/locks. A hand-written lock table checks the
parsing of the lines that are not the holder's.
"""

from __future__ import annotations

import os
from pathlib import Path

from daemon.eventlog import EventStore
from daemon.eventlog.store import lock_path, writer_pid


async def test_the_writer_is_found_while_it_holds_the_log_and_not_after(tmp_path: Path) -> None:
    db = tmp_path / "admitd.db"
    assert writer_pid(db) is None  # no lock file at all
    store = await EventStore.open(db)
    try:
        assert writer_pid(db) == os.getpid()
    finally:
        await store.close()
    assert lock_path(db).exists() and writer_pid(db) is None  # the lock file stays; nobody holds it


def test_only_an_exclusive_flock_of_that_pid_on_that_inode_counts(tmp_path: Path) -> None:
    db = tmp_path / "admitd.db"
    lock_path(db).write_text("4242\n")
    inode = os.stat(lock_path(db)).st_ino
    table = tmp_path / "locks"
    lines = {
        "holder": f"1: FLOCK  ADVISORY  WRITE 4242 00:2d:{inode} 0 EOF",
        "waiter": f"1: -> FLOCK  ADVISORY  WRITE 4242 00:2d:{inode} 0 EOF",
        "another pid": f"2: FLOCK  ADVISORY  WRITE 4243 00:2d:{inode} 0 EOF",
        "another file": f"3: FLOCK  ADVISORY  WRITE 4242 00:2d:{inode + 1} 0 EOF",
        "shared": f"4: FLOCK  ADVISORY  READ 4242 00:2d:{inode} 0 EOF",
        "posix": f"5: POSIX  ADVISORY  WRITE 4242 00:2d:{inode} 0 EOF",
    }
    for name, line in lines.items():
        table.write_text(line + "\n")
        assert (writer_pid(db, locks=table) == 4242) == (name == "holder"), name
    lock_path(db).write_text("not a pid\n")
    table.write_text(lines["holder"] + "\n")
    assert writer_pid(db, locks=table) is None
