"""`admitd run` checks the log before it trusts it: the hash chain from the snapshot it starts from to the head is
verified while it is folded, a break stops the start with exit 2 naming the first bad seq, and only an operator's
`--accept-chain-break SEQ` runs on it, recorded in the log as `log.break_accepted`.

Real: SQLite files and triggers, EventStore/LogReader, replay and the fold, the `admitd` CLI as a subprocess (its
start-up up to the API server). Faked: the API server is an address nobody listens on (127.0.0.1:1), so a daemon
that got past the log's check stops there with the API server's message; edits are SQL a user with write access
could run after dropping the guard triggers.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from daemon.domain import events as ev
from daemon.eventlog import EventStore, LogReader, codec, replay, save_snapshot
from daemon.eventlog.errors import ChainBroken, EventLogError, LogNotTrusted
from daemon.kube.run import Daemon
from tests.integration.logtools import admitd, assert_one_clean_line
from tests.samples import one_of_each

KUBECONFIG = """\
apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1", insecure-skip-tls-verify: true}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
current-context: c
"""


@pytest.fixture
def kubeconfig(tmp_path: Path) -> Path:
    path = tmp_path / "kubeconfig"
    path.write_text(KUBECONFIG)
    return path


async def make_log(path: Path, *, snapshot_after: int | None = None) -> int:
    """A log of one event of each type (a snapshot after the first `snapshot_after`); returns its last seq."""
    events = one_of_each()
    async with await EventStore.open(path) as store:
        if snapshot_after is None:
            await store.append(events)
        else:
            await store.append(events[:snapshot_after])
            with LogReader(path) as reader:
                await save_snapshot(store, replay(reader))
            await store.append(events[snapshot_after:])
    return len(events)


def unguarded(path: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("DROP TRIGGER IF EXISTS events_are_append_only_no_update")
    conn.execute("DROP TRIGGER IF EXISTS events_are_append_only_no_delete")
    return conn


def edit_row(path: Path, seq: int) -> None:
    """Row `seq`'s payload changed (its ClusterQueue renamed where it names one, else a space added: still JSON)."""
    conn = unguarded(path)
    (before,) = conn.execute("SELECT payload FROM events WHERE seq = ?", (seq,)).fetchone()
    after = bytes(before).replace(b"team-research", b"team-evil")
    conn.execute("UPDATE events SET payload = ? WHERE seq = ?", (after if after != before else after + b" ", seq))
    conn.close()


def rows(path: Path) -> int:
    with LogReader(path) as reader:
        return reader.last_seq()


def snapshot_of(path: Path, **kw: object) -> bytes:
    with LogReader(path) as reader:
        return codec.encode_json(replay(reader, **kw).to_snapshot())  # type: ignore[arg-type]


# --- the fold's check -----------------------------------------------------------------------------------------


async def test_a_verified_replay_gives_the_same_state_as_an_unverified_one(tmp_path: Path) -> None:
    path = tmp_path / "a.db"
    await make_log(path, snapshot_after=10)
    assert snapshot_of(path, verify=True) == snapshot_of(path) == snapshot_of(path, use_snapshots=False)


@pytest.mark.parametrize("edited", [3, 12], ids=["from-the-first-event", "after-the-snapshot"])
async def test_a_verified_replay_stops_at_an_edited_row_it_folds(tmp_path: Path, edited: int) -> None:
    path = tmp_path / "a.db"
    # With no snapshot the whole chain is folded; with one at seq 10 the rows after it are.
    await make_log(path, snapshot_after=None if edited < 10 else 10)
    edit_row(path, edited)
    with LogReader(path) as reader, pytest.raises(ChainBroken) as info:
        replay(reader, verify=True)
    assert (info.value.seq, info.value.kind) == (edited, "mismatch")


async def test_rows_before_the_snapshot_started_from_are_vouched_for_by_its_digest(tmp_path: Path) -> None:
    # The documented cost trade-off: a start-up verifies from its snapshot on; `log verify` walks the whole chain.
    path = tmp_path / "a.db"
    await make_log(path, snapshot_after=10)
    edit_row(path, 4)
    with LogReader(path) as reader:
        replay(reader, verify=True)
        with pytest.raises(ChainBroken):
            reader.check()


async def test_a_verified_replay_finds_a_gap_and_a_cut_tail(tmp_path: Path) -> None:
    gap, cut = tmp_path / "gap.db", tmp_path / "cut.db"
    last = await make_log(gap)
    await make_log(cut)
    with unguarded(gap) as conn:
        conn.execute("DELETE FROM events WHERE seq = 6")
    with unguarded(cut) as conn:
        conn.execute("DELETE FROM events WHERE seq >= ?", (last - 1,))
    with LogReader(gap) as reader, pytest.raises(ChainBroken) as info:
        replay(reader, verify=True)
    assert (info.value.seq, info.value.kind) == (6, "gap")
    with LogReader(cut) as reader, pytest.raises(ChainBroken) as info:
        replay(reader, verify=True)
    assert (info.value.seq, info.value.kind) == (last - 1, "cut")


async def test_an_accepted_break_is_folded_as_stored_and_only_that_one(tmp_path: Path) -> None:
    path = tmp_path / "a.db"
    await make_log(path)
    edit_row(path, 4)
    edit_row(path, 8)
    with LogReader(path) as reader:
        with pytest.raises(ChainBroken) as info:
            replay(reader, verify=True, accepted=frozenset({4}))
        assert info.value.seq == 8
        state = replay(reader, verify=True, accepted=frozenset({4, 8}))
    assert codec.encode_json(state.to_snapshot()) == snapshot_of(path)  # the rows as stored, edits and all


# --- the daemon's start-up -------------------------------------------------------------------------------------


async def test_every_damaged_page_stops_the_start_with_a_clear_error_or_changes_nothing(tmp_path: Path) -> None:
    """Whatever page of the file is damaged, the start-up's replay either gives the same state or raises an
    event-log error with exit 2 (never an internal error, exit 70, and never a different state)."""
    good = tmp_path / "good.db"
    await make_log(good, snapshot_after=10)
    want = snapshot_of(good)
    data = good.read_bytes()
    page = 4096
    outcomes: dict[str, int] = {}
    for index in range(1, len(data) // page):
        damaged = tmp_path / f"damaged-{index}.db"
        start = index * page + 8
        damaged.write_bytes(data[:start] + b"\x5a" * 512 + data[start + 512 :])
        try:
            state, accepting = Daemon._replay(damaged, frozenset())
        except EventLogError as e:
            assert e.exit_code == 2, (index, e)
            outcomes[type(e).__name__] = outcomes.get(type(e).__name__, 0) + 1
        else:
            assert accepting == []
            assert codec.encode_json(state.to_snapshot()) == want, index
            outcomes["unchanged"] = outcomes.get("unchanged", 0) + 1
    assert set(outcomes) - {"unchanged"}, outcomes  # some damage was found, so the loop tested something


async def test_run_refuses_a_broken_chain_with_exit_2_and_appends_nothing(tmp_path: Path, kubeconfig: Path) -> None:
    path = tmp_path / "a.db"
    last = await make_log(path)
    edit_row(path, 4)
    result = admitd("run", "--db", str(path), "--kubeconfig", str(kubeconfig))
    assert_one_clean_line(result, 2, "hash chain broken at seq 4", "--accept-chain-break 4")
    assert rows(path) == last


async def test_an_accepted_break_is_recorded_once_and_later_starts_trust_it(tmp_path: Path, kubeconfig: Path) -> None:
    path = tmp_path / "a.db"
    last = await make_log(path)
    edit_row(path, 4)

    wrong = admitd("run", "--db", str(path), "--kubeconfig", str(kubeconfig), "--accept-chain-break", "5")
    assert_one_clean_line(wrong, 2, "hash chain broken at seq 4")
    assert rows(path) == last

    accepted = admitd("run", "--db", str(path), "--kubeconfig", str(kubeconfig), "--accept-chain-break", "4")
    assert "API server unreachable" in accepted.stderr, accepted.stderr[-2000:]  # got past the log's check
    assert acceptances(path) == [(last + 1, 4, "stored hash does not match the row's contents")]

    verify = admitd("log", "verify", "--db", str(path))
    assert verify.returncode == 0, verify.stderr
    assert "but for 1 accepted break(s), at seq 4" in verify.stdout

    again = admitd("run", "--db", str(path), "--kubeconfig", str(kubeconfig))
    assert "API server unreachable" in again.stderr, again.stderr[-2000:]
    assert len(acceptances(path)) == 1


def acceptances(path: Path) -> list[tuple[int, int, str]]:
    """`(row seq, accepted seq, problem)` of each acceptance the log records (the samples' own one left out)."""
    with LogReader(path) as reader:
        facts = [
            (r.seq, codec.decode(r.type, r.version, r.payload, seq=r.seq)) for r in reader.events_of(ev.BREAK_SUBJECT)
        ]
    return [(seq, f.seq, f.problem) for seq, f in facts if isinstance(f, ev.ChainBreakAccepted) and f.by != "admitd-0"]


async def test_a_cut_tail_once_accepted_is_a_gap_the_log_grows_past(tmp_path: Path) -> None:
    path = tmp_path / "a.db"
    last = await make_log(path)
    with unguarded(path) as conn:
        conn.execute("DELETE FROM events WHERE seq >= ?", (last - 2,))
    with pytest.raises(LogNotTrusted, match=f"seq {last - 2}: rows {last - 2}..{last} at the end are missing"):
        Daemon._replay(path, frozenset())
    _, accepting = Daemon._replay(path, frozenset({last - 2}))
    [broken] = accepting
    async with await EventStore.open(path) as store:  # appends above the highest seq ever written
        fact = ev.ChainBreakAccepted(seq=broken.seq, problem=broken.problem, by="test", at=1)
        assert await store.append([fact, *one_of_each()[:1]]) == [last + 1, last + 2]
    state, accepting = Daemon._replay(path, frozenset())
    assert accepting == [] and state.seq == last + 2
    with LogReader(path) as reader:
        assert reader.check().accepted == (last - 2,)
