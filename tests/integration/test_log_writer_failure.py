"""A writer that meets any failure stops loudly: every pending and every later append fails naming the cause.

Real: SQLite files, aiosqlite, the EventStore's two-task pipeline, the `admitd` CLI as a subprocess under a real
file size limit (RLIMIT_FSIZE; Python ignores SIGXFSZ, so writes fail with EFBIG as on a full disk).
Faked: the "bug" cases inject an exception into the commit loop (the connection's executemany) or the encoder,
because no real input is known to raise there; the values beyond SQLite's INTEGER are real.
"""

from __future__ import annotations

import asyncio
import resource
from pathlib import Path

import pytest

from daemon.domain import events as ev
from daemon.eventlog import EventStore, LogReader, codec
from daemon.eventlog.errors import AppendFailed
from tests.integration.logtools import admitd, assert_one_clean_line, scenario

# A hang is the failure these tests exist for: this turns one into an error instead of a stuck run.
HANG = 60


def job(i: int) -> ev.Event:
    return ev.JobFinished(job=f"ns/j{i}", at=i)


async def test_a_recorded_at_beyond_sqlite_integer_fails_its_batch_and_every_later_append(tmp_path: Path) -> None:
    path = tmp_path / "big.db"
    store = await EventStore.open(path)
    try:
        assert await store.append([job(1)]) == [1]
        bad = store.submit([(job(2), None)], recorded_at=2**63)
        later = store.submit([(job(3), None)])
        with pytest.raises(AppendFailed, match=r"recorded_at 9223372036854775808 is outside SQLite's INTEGER range"):
            await asyncio.wait_for(bad, HANG)
        with pytest.raises(AppendFailed, match="recorded_at 9223372036854775808"):
            await asyncio.wait_for(later, HANG)
        with pytest.raises(AppendFailed, match=r"the writer stopped earlier: .*recorded_at 9223372036854775808"):
            await store.append([job(4)])
    finally:
        await asyncio.wait_for(store.close(), HANG)
    with LogReader(path) as reader:
        assert reader.verify() == 1


async def test_a_cause_beyond_sqlite_integer_is_named(tmp_path: Path) -> None:
    async with await EventStore.open(tmp_path / "cause.db") as store:
        with pytest.raises(AppendFailed, match=r"cause -9223372036854775809 is outside"):
            await asyncio.wait_for(store.append([job(1)], cause=-(2**63) - 1), HANG)


async def test_an_unexpected_exception_in_the_commit_loop_fails_pending_and_later_appends(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "bug.db"
    store = await EventStore.open(path)
    try:
        await store.append([job(0)])

        async def broken(*args: object, **kw: object) -> None:
            raise OverflowError("injected: Python int too large to convert to SQLite INTEGER")

        monkeypatch.setattr(store._conn, "executemany", broken)
        # Many appenders at once: the first batch fails in the commit, the ones queued or prepared behind it fail too.
        pending = [store.submit([(job(i), None)]) for i in range(1, 50)]
        results = await asyncio.wait_for(asyncio.gather(*pending, return_exceptions=True), HANG)
        assert all(isinstance(r, AppendFailed) for r in results), results
        assert all("OverflowError: injected" in str(r) for r in results)
        with pytest.raises(AppendFailed, match="writer stopped earlier: OverflowError: injected"):
            store.submit([(job(99), None)])
    finally:
        await asyncio.wait_for(store.close(), HANG)
    with LogReader(path) as reader:
        assert reader.verify() == 1


async def test_an_unexpected_exception_while_preparing_lets_prepared_batches_commit_and_stops_the_rest(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "encode.db"
    real = codec.encode_payload

    def encode(event: ev.Event) -> bytes:
        if isinstance(event, ev.JobFinished) and event.at == 13:
            raise RuntimeError("injected: cannot encode")
        return real(event)

    monkeypatch.setattr(codec, "encode_payload", encode)
    store = await EventStore.open(path)
    try:
        good = await store.append([job(i) for i in range(1, 13)])
        bad = store.submit([(job(13), None)])
        after = store.submit([(job(14), None)])
        with pytest.raises(AppendFailed, match="RuntimeError: injected: cannot encode"):
            await asyncio.wait_for(bad, HANG)
        with pytest.raises(AppendFailed, match="RuntimeError: injected"):  # same batch, or queued behind it
            await asyncio.wait_for(after, HANG)
        with pytest.raises(AppendFailed, match="writer stopped earlier: RuntimeError: injected"):
            store.submit([(job(15), None)])
    finally:
        await asyncio.wait_for(store.close(), HANG)
    assert good == list(range(1, 13))
    with LogReader(path) as reader:
        assert reader.verify() == 12


async def test_close_fails_appends_that_were_never_written_instead_of_leaving_them_waiting(tmp_path: Path) -> None:
    store = await EventStore.open(tmp_path / "closed.db")
    futures = [store.submit([(job(i), None)]) for i in range(5000)]
    await store.close()
    outcomes = await asyncio.wait_for(asyncio.gather(*futures, return_exceptions=True), HANG)
    # Some may have been written before the close; none is left pending.
    assert all(isinstance(o, list | AppendFailed) for o in outcomes)


def _file_size_limit(limit: int) -> None:
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))


@pytest.mark.timeout(180)
async def test_a_cancellation_while_the_log_closes_is_not_lost(tmp_path: Path) -> None:
    """Ctrl-C that lands while the writer is being stopped: the log is closed and released, and the cancellation
    still reaches the caller (before, `close` swallowed it and a simulation went on to print its result)."""
    path = tmp_path / "closing.db"
    store = await EventStore.open(path)
    assert await store.append([job(1)]) == [1]
    closing = asyncio.create_task(store.close())
    await asyncio.sleep(0)  # `close` has cancelled the writer tasks and waits for them to end
    assert not closing.done()
    closing.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(closing, HANG)
    assert closing.cancelled()
    async with await EventStore.open(path) as again:  # released: a new writer gets the log
        assert await again.append([job(2)]) == [2]
    with LogReader(path) as reader:
        assert reader.verify() == 2


def test_simulate_on_a_file_that_cannot_grow_is_one_line_and_exit_1(tmp_path: Path) -> None:
    # The disk-full class: with a 1 MiB file size limit, the log's writes fail partway through the run.
    db = tmp_path / "full.db"
    result = admitd(
        "simulate", str(scenario(tmp_path / "s.yaml", 3000)), "--db", str(db), "--json",
        preexec_fn=lambda: _file_size_limit(2**20),
    )  # fmt: skip
    assert_one_clean_line(result, 1, str(db), "batch not written", "RLIMIT_FSIZE")
    assert result.stdout == ""


def test_export_since_beyond_sqlite_integer_is_a_clear_message_and_exit_2(tmp_path: Path) -> None:
    result = admitd("log", "export", "--since", str(2**63), "--db", str(tmp_path / "none.db"))
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert f"--since: must be at most {2**63 - 1}" in result.stderr
