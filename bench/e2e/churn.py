"""The preemptions of one admitd run, read from its event log: which rule made them, whom they hit, and whether the
preemptor was already waiting when its victim was admitted.

Usage: python -m bench.e2e.churn RUN/admitd/admitd.db   (a run kept with `bench.e2e run ... --keep`)
   or: admitd log export --db RUN/admitd/admitd.db | python -m bench.e2e.churn -

Prints one JSON object. `churn` is pure arithmetic over the exported events (`admitd log export`, one dict each):
- every `workload.preempted` by its `reason` and `policy` (the rule that allowed it), and by preemptor and victim class
  (the benchmark's Job names begin with their class: `small-0-12-0`);
- whether the victim had started: its `job.unsuspended` for its latest admission was recorded before the preemption
  (a victim that had not started costs no work and, since 64a6944, no request; a started one is re-suspended);
- for a started victim, whether its preemptor's Job had been observed before the victim's admission (it was waiting
  already, so the admission could have been avoided without waiting for anything), or arrived later;
- whether the victim borrowed when admitted, and how long after its admission it was preempted.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
from collections import Counter
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from bench.e2e.recorder import percentile


def klass(key: str) -> str:
    """The benchmark class of a Job key `namespace/name` (its name's first dash-separated word)."""
    return key.split("/", 1)[-1].split("-", 1)[0]


def _quantiles(values: list[float]) -> dict[str, float | None]:
    if not values:
        return {"median": None, "p90": None}
    return {"median": round(statistics.median(values), 3), "p90": round(percentile(values, 90), 3)}


def churn(events: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """The preemption figures of one event log's events (in seq order). Times in seconds of the log's clock."""
    observed: dict[str, int] = {}  # Job key -> recorded_at of its first job.observed (ms)
    admitted: dict[str, tuple[int, int, bool]] = {}  # Job key -> (seq, at ms, borrowed) of its latest admission
    started: dict[str, int] = {}  # Job key -> the admission seq its latest job.unsuspended carried out
    rules: Counter[str] = Counter()
    pairs: Counter[str] = Counter()
    started_rules: Counter[str] = Counter()
    started_pairs: Counter[str] = Counter()
    waiting_before: Counter[str] = Counter()  # of started victims: preemptor observed before the victim's admission
    borrowed_victims: Counter[str] = Counter()
    after_admission_s: list[float] = []
    started_after_admission_s: list[float] = []
    total = started_total = 0
    for e in events:
        kind, p = e["type"], e["payload"]
        if kind == "job.observed":
            w = p["workload"]
            observed.setdefault(f"{w['namespace']}/{w['name']}", int(e["recorded_at"]))
        elif kind == "workload.admitted":
            admitted[p["workload"]] = (int(e["seq"]), int(p["at"]), bool(p.get("borrowed")))
        elif kind == "job.unsuspended":
            started[p["job"]] = int(p["decision"])
        elif kind == "workload.preempted":
            victim, preemptor = p["workload"], p.get("preemptor")
            rule = f"{p['reason']} ({p['policy']})"
            pair = f"{klass(preemptor) if preemptor else '-'} over {klass(victim)}"
            total += 1
            rules[rule] += 1
            pairs[pair] += 1
            adm = admitted.get(victim)
            if adm is None:
                raise ValueError(f"seq {e['seq']}: {victim} preempted without an admission in the log")
            adm_seq, adm_at, borrowed = adm
            waited = (int(p["at"]) - adm_at) / 1000
            after_admission_s.append(waited)
            if started.get(victim) != adm_seq:
                continue  # its admission had not reached the Job: nothing ran, nothing to re-suspend
            started_total += 1
            started_rules[rule] += 1
            started_pairs[pair] += 1
            started_after_admission_s.append(waited)
            if borrowed:
                borrowed_victims[rule] += 1
            seen = observed.get(preemptor) if preemptor else None
            waiting_before[
                "preemptor waiting already" if seen is not None and seen <= adm_at else "preemptor later"
            ] += 1
    return {
        "preemptions": total,
        "by_rule": dict(rules.most_common()),
        "by_classes": dict(pairs.most_common()),
        "victim_admission_to_preemption_s": _quantiles(after_admission_s),
        "of_started_victims": {
            "preemptions": started_total,
            "by_rule": dict(started_rules.most_common()),
            "by_classes": dict(started_pairs.most_common()),
            "victim_borrowed_when_admitted_by_rule": dict(borrowed_victims.most_common()),
            "preemptor_observed_before_the_victims_admission": dict(waiting_before.most_common()),
            "victim_admission_to_preemption_s": _quantiles(started_after_admission_s),
        },
    }


def _events(source: str) -> Iterable[dict[str, Any]]:
    if source == "-":
        for line in sys.stdin:
            if line.strip():
                yield json.loads(line)
        return
    db = Path(source)
    if not db.exists():
        raise SystemExit(f"{db}: no such event log")
    proc = subprocess.Popen(
        [sys.executable, "-m", "daemon.cli", "log", "export", "--db", str(db)], stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None
    for line in proc.stdout:
        yield json.loads(line)
    if proc.wait() != 0:
        raise SystemExit(f"admitd log export --db {db} exited with {proc.returncode}")


def main() -> int:
    if len(sys.argv) != 2:
        raise SystemExit(__doc__)
    json.dump(churn(_events(sys.argv[1])), sys.stdout, indent=2)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
