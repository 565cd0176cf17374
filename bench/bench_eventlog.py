"""Event-log benchmarks: append throughput by batch size, replay throughput, start-up from a snapshot, verify, peak RSS.

Usage: python -m bench.bench_eventlog [--events 1000000] [--dir bench/out]
Prints one JSON object. Each phase runs in its own process so its peak RSS is its own.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

from daemon.domain import events as ev
from daemon.domain.model import Admission, PodSet, PodSetAssignment, Workload
from daemon.eventlog import EventStore, LogReader, replay, save_snapshot
from daemon.eventlog.codec import encode_payload

ROOT = Path(__file__).resolve().parent.parent


def rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def kb_event(i: int) -> ev.Event:
    # ~1 KB payload: a rejected object with a few long error strings.
    return ev.ObjectRejected(
        kind="ClusterQueue", name=f"cq-{i}", errors=tuple(f"spec.resourceGroups[{j}]: {'x' * 230}" for j in range(4))
    )


async def append_phase(path: Path, batch: int, total: int) -> dict[str, object]:
    path.unlink(missing_ok=True)
    store = await EventStore.open(path, max_batch=max(batch, 1000))
    # Every event has a subject of its own, as new jobs do. Events are built outside the timed section, one
    # batch at a time, so the peak RSS is the store's and not a pre-built list's.
    payload = sum(len(encode_payload(kb_event(i))) for i in range(batch))
    rates = []
    done = 0
    chunk_batches = max(1, total // batch // 5)
    while done + chunk_batches * batch <= total:
        elapsed = 0.0
        for b in range(chunk_batches):
            start = done + b * batch
            events = [kb_event(i) for i in range(start, start + batch)]
            t0 = time.perf_counter()
            await store.append(events)
            elapsed += time.perf_counter() - t0
        rates.append(chunk_batches * batch / elapsed)
        done += chunk_batches * batch
    await store.close()
    return {
        "phase": f"append_batch_{batch}",
        "events": done,
        "payload_bytes_mean": payload // batch,
        "events_per_s_median": round(statistics.median(rates)),
        "events_per_s_runs": [round(r) for r in rates],
        "peak_rss_mib": round(rss_mib(), 1),
    }


async def group_commit_phase(path: Path, total: int) -> dict[str, object]:
    path.unlink(missing_ok=True)
    store = await EventStore.open(path, max_batch=1000)
    t0 = time.perf_counter()
    await asyncio.gather(*(store.append([kb_event(i)]) for i in range(total)))
    dt = time.perf_counter() - t0
    await store.close()
    return {
        "phase": "append_concurrent_single_events_group_commit",
        "events": total,
        "events_per_s": round(total / dt),
        "peak_rss_mib": round(rss_mib(), 1),
    }


def job_events(n_jobs: int) -> list[ev.Event]:
    out: list[ev.Event] = []
    for i in range(n_jobs):
        key = f"team-{i % 30}/job-{i}"
        wl = Workload(
            namespace=f"team-{i % 30}",
            name=f"job-{i}",
            uid=f"uid-{i}",
            created_at=i,
            queue_name="q",
            pod_sets=(PodSet(name="main", count=4, requests={"nvidia.com/gpu": 1000, "cpu": 8000}),),
        )
        out.append(ev.JobObserved(workload=wl))
        out.append(
            ev.WorkloadAdmitted(
                workload=key,
                at=i + 1,
                admission=Admission(
                    cluster_queue=f"cq-{i % 30}",
                    pod_sets=(
                        PodSetAssignment(
                            name="main",
                            count=4,
                            flavors={"nvidia.com/gpu": "h100", "cpu": "h100"},
                            usage={"nvidia.com/gpu": 4000, "cpu": 32000},
                        ),
                    ),
                ),
            )
        )
        out.append(ev.JobFinished(job=key, at=i + 2))
    return out


async def build_log(path: Path, total: int) -> dict[str, object]:
    path.unlink(missing_ok=True)
    store = await EventStore.open(path, max_batch=1000)
    events = job_events(total // 3 + 1)[:total]
    t0 = time.perf_counter()
    for i in range(0, len(events), 1000):
        await store.append(events[i : i + 1000])
    dt = time.perf_counter() - t0
    await store.close()
    return {
        "phase": "build_replay_log",
        "events": len(events),
        "events_per_s": round(len(events) / dt),
        "file_mib": round(path.stat().st_size / 2**20, 1),
        "peak_rss_mib": round(rss_mib(), 1),
    }


def replay_phase(path: Path, *, verify: bool = False) -> dict[str, object]:
    """The whole log folded from its first event; `verify`: each row checked against the hash chain as it is read
    (what `admitd run` does when no snapshot checks)."""
    runs = []
    for _ in range(3):
        t0 = time.perf_counter()
        with LogReader(path) as reader:
            state = replay(reader, use_snapshots=False, verify=verify)
        runs.append(time.perf_counter() - t0)
    n = state.seq
    return {
        "phase": "replay_from_scratch_verified" if verify else "replay_from_scratch",
        "events": n,
        "seconds_runs": [round(r, 2) for r in runs],
        "events_per_s_median": round(n / statistics.median(runs)),
        "peak_rss_mib": round(rss_mib(), 1),
    }


async def snapshot_then_startup(path: Path, tail: int) -> dict[str, object]:
    with LogReader(path) as reader:
        state = replay(reader, use_snapshots=False)
    store = await EventStore.open(path)
    await save_snapshot(store, state)
    start = state.seq
    await store.append(job_events(tail // 3 + 1)[:tail])
    await store.close()
    return {"phase": "snapshot_written", "snapshot_seq": start, "tail_events": tail}


def startup_phase(path: Path, *, verify: bool = False) -> dict[str, object]:
    """The newest snapshot and the tail after it; `verify`: the tail checked against the hash chain (`admitd run`)."""
    runs = []
    for _ in range(3):
        t0 = time.perf_counter()
        with LogReader(path) as reader:
            state = replay(reader, verify=verify)
        runs.append(time.perf_counter() - t0)
    return {
        "phase": "startup_from_snapshot_verified" if verify else "startup_from_snapshot",
        "log_events": state.seq,
        "seconds_runs": [round(r, 3) for r in runs],
        "seconds_median": round(statistics.median(runs), 3),
        "peak_rss_mib": round(rss_mib(), 1),
    }


def verify_phase(path: Path) -> dict[str, object]:
    """`log verify`'s work: the whole hash chain (and, where there are any, every snapshot's digest)."""
    runs = []
    for _ in range(3):
        t0 = time.perf_counter()
        with LogReader(path) as reader:
            n = reader.verify()
        runs.append(time.perf_counter() - t0)
    return {
        "phase": "verify",
        "events": n,
        "seconds_runs": [round(r, 2) for r in runs],
        "events_per_s_median": round(n / statistics.median(runs)),
        "peak_rss_mib": round(rss_mib(), 1),
    }


def run_phase(args: list[str], folder: Path) -> dict[str, object]:
    out = subprocess.run(
        [sys.executable, "-m", "bench.bench_eventlog", "--dir", str(folder), "--phase", *args],
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
    )
    result: dict[str, object] = json.loads(out.stdout)
    return result


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--dir", type=Path, default=ROOT / "bench" / "out")
    parser.add_argument("--phase", nargs="*")
    args = parser.parse_args()
    args.dir.mkdir(parents=True, exist_ok=True)
    if args.phase:
        name, *rest = args.phase
        db = args.dir / "bench.db"
        result: dict[str, object]
        if name == "append":
            result = asyncio.run(append_phase(args.dir / f"append-{rest[0]}.db", int(rest[0]), int(rest[1])))
        elif name == "group":
            result = asyncio.run(group_commit_phase(args.dir / "group.db", int(rest[0])))
        elif name == "build":
            result = asyncio.run(build_log(db, int(rest[0])))
        elif name == "replay":
            result = replay_phase(db, verify=rest == ["verified"])
        elif name == "snapshot":
            result = asyncio.run(snapshot_then_startup(db, int(rest[0])))
        elif name == "verify":
            result = verify_phase(db)
        else:
            result = startup_phase(db, verify=rest == ["verified"])
        print(json.dumps(result))
        return
    results = [
        run_phase(["append", "1", "2000"], args.dir),
        run_phase(["append", "100", "100000"], args.dir),
        run_phase(["append", "1000", "300000"], args.dir),
        run_phase(["group", "20000"], args.dir),
        run_phase(["build", str(args.events)], args.dir),
        run_phase(["replay"], args.dir),
        run_phase(["replay", "verified"], args.dir),
        run_phase(["snapshot", "10000"], args.dir),
        run_phase(["startup"], args.dir),
        run_phase(["startup", "verified"], args.dir),
        run_phase(["verify"], args.dir),
    ]
    print(json.dumps({"benchmark": "eventlog", "python": sys.version.split()[0], "results": results}, indent=2))


if __name__ == "__main__":
    main()
