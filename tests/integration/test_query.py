"""`admitd explain|history|queues|pending|replay` on logs made by `admitd simulate` from hand-built scenarios
(tests/integration/query_scenarios/) whose right answers are known, plus a log written with a real clock.

Real: the CLI as a subprocess, the simulator's fold, engine and SQLite event log, the read-only reader.
Faked: the cluster (the simulator's virtual clock); for the wall-clock log, events appended directly to the store.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from daemon.eventlog import LogReader, replay
from daemon.query.listing import pending_seqs
from daemon.query.moment import clock_of, resolve, state_at

ROOT = Path(__file__).resolve().parents[2]
SCENARIOS = Path(__file__).resolve().parent / "query_scenarios"
SAMPLES = ROOT / "config" / "samples"


def admitd(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "daemon.cli", *args], capture_output=True, text=True, cwd=ROOT, timeout=120, check=False
    )


def answer(*args: str) -> dict[str, Any]:
    result = admitd(*args, "--json")
    assert result.returncode == 0, result.stderr
    body: dict[str, Any] = json.loads(result.stdout)
    return body


@pytest.fixture(scope="module")
def logs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    out: dict[str, str] = {}
    base = tmp_path_factory.mktemp("query-logs")
    sources = {p.stem: p for p in SCENARIOS.glob("*.yaml")} | {"cohort": SAMPLES / "cohort-borrow-reclaim.yaml"}
    for name, path in sources.items():
        db = base / f"{name}.db"
        done = admitd("simulate", str(path), "--db", str(db), "--json")
        assert done.returncode == 0, done.stderr
        out[name] = str(db)
    return out


def said(body: dict[str, Any], fragment: str) -> list[int]:
    """The seqs of the statements containing `fragment`."""
    return [s["seq"] for s in body["statements"] if fragment in s["text"]]


def seqs_of(db: str, subject: str, type_: str) -> list[int]:
    with LogReader(db) as reader:
        return [e.seq for e in reader.events_of(subject) if e.type == type_]


def seq_of(db: str, subject: str, type_: str, nth: int = 0) -> int:
    with LogReader(db) as reader:
        return [e.seq for e in reader.events_of(subject) if e.type == type_][nth]


def test_a_job_blocked_by_a_bigger_job_ahead(logs: dict[str, str]) -> None:
    db = logs["strict-fifo-blocked"]
    x = answer("explain", "lab/small", "--at", "+1m", "--db", db)
    assert (x["status"], x["verdict"]) == ("pending", "waiting")
    assert x["pending"]["reason"] == "BlockedByHead"
    assert x["pending"]["blocked_by"] == "lab/big"
    assert x["pending"]["seq"] == seq_of(db, "job/lab/small", "workload.pending")
    assert x["position"] == {"cluster_queue": 1, "local_queue": 1, "pending_in_cluster_queue": 2}
    assert x["ahead"]["count"] == 1
    (big,) = x["ahead"]["first"]
    assert (big["job"], big["requests"], big["reason"]) == ("lab/big", {"nvidia.com/gpu": "4"}, "WaitingForQuota")
    assert said(x, "it waits on lab/big") == [seq_of(db, "job/lab/big", "workload.pending")]
    # Quota is not what stops it: 2 of 8 are free and it asks for 1.
    (a100,) = x["flavors"]
    assert a100["resources"][0]["verdict"] == "fits"
    assert a100["resources"][0]["available"] == "2"
    # The head itself: short by 2 because `running` holds 6.
    head = answer("explain", "lab/big", "--at", "+1m", "--db", db)
    assert head["pending"]["shortages"] == [
        {"flavor": "a100", "resource": "nvidia.com/gpu", "requested": "4", "available": "2", "short": "2"}
    ]
    assert [h["job"] for h in head["holders"]] == ["lab/running"]
    assert head["holders"][0]["admitted_seq"] == seq_of(db, "job/lab/running", "workload.admitted")


def test_short_in_one_flavor_and_held_by_the_borrowing_limit_in_the_other(logs: dict[str, str]) -> None:
    db = logs["two-flavors-borrowing-limit"]
    x = answer("explain", "ml/wants4", "--at", "+1m", "--db", db)
    assert x["pending"]["reason"] == "WaitingForQuota"
    flavors = {f["flavor"]: f["resources"][0] for f in x["flavors"]}
    assert list(flavors) == ["h100", "a100"]  # the ClusterQueue's order
    h100, a100 = flavors["h100"], flavors["a100"]
    assert (h100["verdict"], h100["used"], h100["available"], h100["requested"]) == ("short", "6", "2", "4")
    assert h100["cohort_free"] == "0"  # nobody else in the cohort has h100s
    assert (a100["verdict"], a100["used"], a100["borrowing_limit"], a100["borrow_left"]) == ("short", "3", "4", "1")
    assert a100["cohort_free"] == "5"  # lender's 8 a100s minus the 3 `side` borrows
    limit = said(x, "blocked by the borrowing limit")
    assert len(limit) == 1 and "a100" in next(
        s["text"] for s in x["statements"] if s["seq"] == limit[0] and "borrowing limit" in s["text"]
    )
    holders = {h["job"]: h for h in x["holders"]}
    assert holders["ml/hog"]["holds"] == [{"flavor": "h100", "resource": "nvidia.com/gpu", "amount": "6"}]
    assert holders["ml/side"]["holds"] == [{"flavor": "a100", "resource": "nvidia.com/gpu", "amount": "3"}]
    assert holders["ml/side"]["admitted_seq"] == seq_of(db, "job/ml/side", "workload.admitted")
    # And `queues` at the same moment: gpu borrows 3 a100s, lender lends them.
    qs = {q["name"]: q for q in answer("queues", "--at", "+1m", "--db", db)["cluster_queues"]}
    gpu_a100 = next(r for r in qs["gpu"]["resources"] if r["flavor"] == "a100")
    lender_a100 = qs["lender"]["resources"][0]
    assert (gpu_a100["used"], gpu_a100["borrowed"], gpu_a100["borrowing_limit"]) == ("3", "3", "4")
    assert (lender_a100["used"], lender_a100["lent"]) == ("0", "3")
    assert (qs["gpu"]["pending"], qs["gpu"]["admitted"], qs["gpu"]["cohort"]) == (1, 2, "pool")


def test_a_preempted_job_names_its_preemptor_policy_and_what_was_freed(logs: dict[str, str]) -> None:
    db = logs["cohort"]
    x = answer("explain", "team-a/a-borrower", "--at", "+6m", "--db", db)
    assert x["status"] == "pending"
    (p,) = x["preemptions"]
    assert p == {
        "seq": seq_of(db, "job/team-a/a-borrower", "workload.preempted"),
        "time": "+5m",
        "preemptor": "team-b/b-routine",
        "preemptor_cluster_queue": "team-b",
        "reason": "InCohortReclamation",
        "policy": "reclaimWithinCohort=Any",
        "freed": [{"flavor": "h100", "resource": "nvidia.com/gpu", "amount": "8"}],
    }
    assert said(x, "preempted at +5m by team-b/b-routine") == [p["seq"]]
    assert {h["job"] for h in x["holders"]} == {"team-a/a-nominal", "team-b/b-routine"}


def test_a_job_that_waited_ran_was_preempted_and_ran_again(logs: dict[str, str]) -> None:
    db = logs["preempted-and-readmitted"]
    h = answer("history", "lab/waiter", "--db", db)
    kinds = [e["kind"] for e in h["events"] if e["kind"] not in ("unsuspended", "suspended")]
    assert kinds == ["observed", "pending", "admitted", "preempted", "evicted", "pending", "admitted", "finished"]
    times = {e["kind"]: e["time"] for e in h["events"]}
    assert times["observed"] == "+1m" and times["finished"] == "+50m"
    admitted = [e for e in h["events"] if e["kind"] == "admitted"]
    assert [e["time"] for e in admitted] == ["+10m", "+20m"]
    assert admitted[1]["text"].startswith("readmitted")
    pre = next(e for e in h["events"] if e["kind"] == "preempted")
    assert (pre["preemptor"], pre["policy"], pre["time"]) == ("lab/vip", "withinClusterQueue=LowerPriority", "+15m")
    assert (h["waiting_seconds"], h["running_seconds"]) == (14 * 60, 35 * 60)  # 1m->10m + 15m->20m; 10m->15m + 20m->50m
    assert (h["admissions"], h["preemptions"], h["status"]) == (2, 1, "finished")
    assert [e["seq"] for e in h["events"]] == sorted(e["seq"] for e in h["events"])
    # At +16m it is back in the queue behind nobody, and vip holds the 4 GPUs.
    x = answer("explain", "lab/waiter", "--at", "+16m", "--db", db)
    assert x["preemptions"][0]["preemptor"] == "lab/vip"
    assert [hd["job"] for hd in x["holders"]] == ["lab/vip"]
    assert said(x, "it cannot borrow: ClusterQueue is in no cohort")
    # While running (+12m) and after (+55m):
    assert answer("explain", "lab/waiter", "--at", "+12m", "--db", db)["status"] == "admitted"
    done = answer("explain", "lab/waiter", "--db", db)
    assert done["status"] == "finished"
    assert done["finished"]["seq"] == seq_of(db, "job/lab/waiter", "job.finished")


def test_a_job_that_can_never_fit(logs: dict[str, str]) -> None:
    db = logs["never-fits-and-unselected"]
    x = answer("explain", "ml/huge", "--db", db)
    assert (x["verdict"], x["never_fits"], x["pending"]["reason"]) == ("never-fits", True, "ExceedsMaxQuota")
    (a100,) = x["flavors"]
    assert (a100["resources"][0]["max_possible"], a100["resources"][0]["requested"]) == ("4", "16")
    assert said(x, "could never hold more than 4")
    assert said(x, "it can never be admitted") == [seq_of(db, "job/ml/huge", "workload.pending")]


def test_a_namespace_that_is_not_selected(logs: dict[str, str]) -> None:
    db = logs["never-fits-and-unselected"]
    x = answer("explain", "web/job", "--db", db)
    assert (x["verdict"], x["pending"]["reason"]) == ("blocked-by-configuration", "NamespaceNotSelected")
    assert said(x, "namespace web has labels team=web") == [seq_of(db, "namespace/web", "namespace.observed")]
    p = answer("pending", "--queue", "small", "--db", db)
    assert [(e["job"], e["position"], e["reason"]) for e in p["cluster_queues"]["small"]] == [
        ("ml/huge", 0, "ExceedsMaxQuota"),
        ("web/job", 1, "NamespaceNotSelected"),
    ]
    by_lq = answer("pending", "--queue", "web/q", "--db", db)
    assert [(e["job"], e["position"], e["local_queue_position"]) for e in by_lq["cluster_queues"]["small"]] == [
        ("web/job", 1, 0)
    ]
    # Each row names the events it rests on: the job's observation and the engine's latest verdict.
    for e in p["cluster_queues"]["small"]:
        subject = f"job/{e['job']}"
        assert e["queued_seq"] == seq_of(db, subject, "job.observed")
        assert e["reason_seq"] == seq_of(db, subject, "workload.pending", -1)


def test_a_pending_row_after_a_preemption_rests_on_the_eviction_and_the_verdict_after_it(
    logs: dict[str, str],
) -> None:
    db = logs["preempted-and-readmitted"]
    evicted = seq_of(db, "job/lab/waiter", "workload.evicted")
    verdicts = [s for s in seqs_of(db, "job/lab/waiter", "workload.pending") if s > evicted]
    with LogReader(db) as reader:  # right after the eviction no cycle has evaluated it yet (`--at` shows instants)
        assert pending_seqs(reader, evicted)("lab/waiter") == (evicted, None)
        assert pending_seqs(reader, verdicts[0])("lab/waiter") == (evicted, verdicts[0])
    later = answer("pending", "--at", "+16m", "--db", db)
    (row,) = [e for rows in later["cluster_queues"].values() for e in rows if e["job"] == "lab/waiter"]
    assert (row["queued_seq"], row["reason_seq"]) == (evicted, verdicts[-1])
    text = admitd("pending", "--at", "+16m", "--db", db).stdout
    assert f"{evicted}/{verdicts[-1]}" in next(line for line in text.splitlines() if "lab/waiter" in line)


def test_every_statement_points_at_an_event_at_or_before_the_moment(logs: dict[str, str]) -> None:
    for db, job, at in [
        (logs["two-flavors-borrowing-limit"], "ml/wants4", "+1m"),
        (logs["cohort"], "team-a/a-borrower", "+6m"),
        (logs["strict-fifo-blocked"], "lab/small", "+1m"),
    ]:
        x = answer("explain", job, "--at", at, "--db", db)
        assert x["statements"]
        for s in x["statements"]:
            assert 1 <= s["seq"] <= x["at"]["seq"], s


def test_replay_equals_the_fold_and_moments_resolve(logs: dict[str, str]) -> None:
    db = logs["cohort"]
    body = answer("replay", "--seq", "16", "--db", db)
    assert body["at"] == {"seq": 16, "time": "+5m"}
    with LogReader(db) as reader:
        expected = replay(reader, use_snapshots=False, upto=16).to_snapshot()
        assert body["state"]["seq"] == 16
        assert sorted(w["workload"]["name"] for w in body["state"]["workloads"]) == sorted(
            w.workload.name for w in expected.workloads
        )
        clock = clock_of(reader)
        m = resolve(reader, clock, at="+5m", seq=None, now_ms=0)
        assert m.seq == max(e.seq for e in reader.iter_events() if e.recorded_at <= 300_000)
        assert state_at(reader, m.seq).to_snapshot() == replay(reader, use_snapshots=False, upto=m.seq).to_snapshot()
    by_time = answer("replay", "--at", "+5m", "--db", db)
    assert by_time["at"]["seq"] == m.seq


def test_clear_errors_for_unknown_jobs_and_times_outside_the_log(logs: dict[str, str]) -> None:
    db = logs["cohort"]
    for args, fragment in [
        (("explain", "team-a/nope"), "no job team-a/nope"),
        (("history", "team-a/nope"), "no job team-a/nope"),
        (("explain", "not-a-key"), "expected NAMESPACE/JOB"),
        (("queues", "--at", "-10h"), "before the log begins"),
        (("queues", "--at", "2026-01-01T00:00:00Z"), "virtual times"),
        (("replay", "--seq", "999"), "outside the log"),
        (("pending", "--queue", "nosuch"), "no ClusterQueue or LocalQueue"),
        (("explain", "team-b/b-urgent", "--at", "+1m"), "had not been seen yet"),
    ]:
        result = admitd(*args, "--db", db)
        assert result.returncode == 2, (args, result.stdout)
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("admitd: ") and fragment in lines[0], (args, result.stderr)


def test_tables_on_a_terminal_and_virtual_times_in_log_stats(logs: dict[str, str]) -> None:
    db = logs["preempted-and-readmitted"]
    text = admitd("explain", "lab/waiter", "--at", "+16m", "--db", db).stdout
    assert text.splitlines()[0] == "lab/waiter: pending (waiting), as of +16m (seq 20)"
    assert "[seq 14] preempted at +15m by lab/vip" in text
    stats = admitd("log", "stats", "--db", db).stdout
    assert "first recorded: +0s" in stats and "last recorded:  +50m" in stats and "1970" not in stats
    assert json.loads(admitd("log", "stats", "--json", "--db", db).stdout)["last_recorded_at"] == "+50m"


async def test_a_real_clock_log_reads_rfc3339_and_relative_times(tmp_path: Path) -> None:
    from daemon.domain import events as ev  # noqa: PLC0415
    from daemon.domain.model import ResourceFlavor  # noqa: PLC0415
    from daemon.eventlog import EventStore  # noqa: PLC0415

    db = tmp_path / "wall.db"
    base = 1_780_000_000_000  # 2026-05-28T20:26:40Z
    store = await EventStore.open(db)
    try:
        for i in range(3):
            await store.submit(
                [(ev.ResourceFlavorObserved(flavor=ResourceFlavor(name=f"f{i}")), None)],
                recorded_at=base + i * 3_600_000,
            )
    finally:
        await store.close()
    ok = answer("replay", "--at", "2026-05-28T21:30:00Z", "--db", str(db))
    assert ok["clock"] == "wall" and ok["at"]["seq"] == 2 and ok["at"]["time"] == "2026-05-28T21:30:00.000Z"
    assert [f["name"] for f in ok["state"]["flavors"]] == ["f0", "f1"]
    early = admitd("queues", "--at", "2026-05-28T20:00:00Z", "--db", str(db))
    assert early.returncode == 2 and "before the log begins" in early.stderr
    assert "2026-05-28T20:26:40.000Z" in early.stderr
    now = answer("queues", "--at", "-1h", "--db", str(db))  # an hour ago: after the last event, so the end
    assert now["at"]["seq"] == 3


@pytest.mark.parametrize(("name", "at"), [("strict-fifo-blocked", "+1m"), ("never-fits-and-unselected", "-0s")])
def test_explain_and_pending_give_one_position_counted_from_0(logs: dict[str, str], name: str, at: str) -> None:
    """One convention, Kueue's visibility API's (positionInClusterQueue counts from 0): `pending`'s POS and LQ-POS,
    `explain`'s JSON and `explain`'s text all give the same number, which is how many are ahead."""
    db = logs[name]
    p = answer("pending", "--at", at, "--db", db)
    rows = [(cq, e) for cq, entries in p["cluster_queues"].items() for e in entries]
    assert rows
    for _cq, e in rows:
        x = answer("explain", e["job"], "--at", at, "--db", db)
        assert x["position"]["cluster_queue"] == e["position"]
        assert x["position"]["local_queue"] == e["local_queue_position"]
        assert x["ahead"]["count"] == e["position"]
        text = admitd("explain", e["job"], "--at", at, "--db", db).stdout
        assert f"position {e['position']} of " in text
        assert f"position {e['local_queue_position']} in LocalQueue {e['local_queue']}" in text
    assert sorted(e["position"] for cq, e in rows if cq == rows[0][0])[0] == 0
