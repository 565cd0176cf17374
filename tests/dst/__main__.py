"""`python -m tests.dst --seeds 1..10000 [--jobs N]`: run seeds of the faulty simulation and report the failing ones,
each shrunk, with its invariant, its shortest trail and the one command that replays it;
`python -m tests.dst --seed N --trace`: replay one seed exactly and print its whole trail.

Exit status: 0 when every seed held every invariant, 1 when one failed, 2 for bad arguments.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

from daemon.sim.faults import FaultSpecError, parse_faults
from daemon.sim.faulty import report_text
from tests.dst.harness import SHAPES, Case, Outcome, _quiet, command, run_case, run_seeds, shrink
from tests.dst.scenarios import Pick

SHOWN = 5  # failing seeds shrunk and shown in full; the others are listed


def _seed_range(text: str) -> range:
    first, sep, last = text.partition("..")
    try:
        lo, hi = (int(first), int(last)) if sep else (int(first), int(first))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected FIRST..LAST (e.g. 1..10000), got {text!r}") from None
    if hi < lo:
        raise argparse.ArgumentTypeError(f"{text!r}: the last seed is before the first")
    return range(lo, hi + 1)


def _ints(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated whole numbers, got {text!r}") from None


def _faults(text: str) -> object:
    try:
        return parse_faults(text)
    except FaultSpecError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tests.dst", description=__doc__.split("\n\n")[0])
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument("--seeds", type=_seed_range, metavar="FIRST..LAST", help="run these seeds")
    which.add_argument("--seed", type=int, help="run one seed (with --trace: print its whole trail)")
    p.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="worker processes (default: the cores)")
    p.add_argument("--shape", choices=sorted(SHAPES), default="issue", help="issue: 150 Jobs, 30 ClusterQueues")
    p.add_argument("--faults", type=_faults, default=parse_faults("all"), metavar="SPEC", help="default: all")
    p.add_argument("--trace", action="store_true", help="with --seed: print the whole trail")
    p.add_argument("--queues", type=_ints, help="with --seed: keep only these queue indexes (a shrunk case)")
    p.add_argument("--keep-jobs", type=_ints, help="with --seed: keep only these job indexes (a shrunk case)")
    p.add_argument("--no-shrink", action="store_true", help="report failing seeds as they are")
    p.add_argument("--json-out", type=Path, help="write the summary (seeds, failures, churn, timing) here")
    args = p.parse_args(argv)
    shape = SHAPES[args.shape]
    if args.seed is not None:
        _quiet()
        case = Case(args.seed, shape, args.faults, Pick(queues=args.queues, jobs=args.keep_jobs))
        result = run_case(case)
        print(report_text(result))
        if args.trace:
            print("whole trail:")
            for at, text, jobs in result.trail.entries:
                print(f"  {at:>9} ms  {text}" + (f"  [{', '.join(jobs)}]" if jobs else ""))
        return 0 if result.ok else 1

    seeds = args.seeds
    started = time.perf_counter()
    seen: list[Outcome] = []

    def summary(outcomes: list[Outcome]) -> dict[str, object]:
        elapsed = time.perf_counter() - started
        return {
            "seeds": [seeds.start, seeds.stop - 1],
            "done": len(outcomes),
            "shape": args.shape,
            "faults": args.faults.describe(),
            "processes": args.jobs,
            "seconds": round(elapsed, 1),
            "seeds_per_second": round(len(outcomes) / elapsed, 3),
            "failed": [
                {"seed": o.seed, "violation": o.violation, "invariants": list(o.invariants)}
                for o in outcomes
                if not o.ok
            ],
            "admissions": sum(o.admissions for o in outcomes),
            "preemptions": sum(o.preemptions for o in outcomes),
            "churn": sum(o.churn for o in outcomes),
            "crashes": sum(o.crashes for o in outcomes),
            "lease_losses": sum(o.lease_losses for o in outcomes),
            "events": sum(o.events for o in outcomes),
            "median_seed_seconds": sorted(o.seconds for o in outcomes)[len(outcomes) // 2] if outcomes else None,
            "cpu_seconds": round(sum(o.cpu_seconds for o in outcomes), 1),
            "median_seed_cpu_seconds": (
                round(sorted(o.cpu_seconds for o in outcomes)[len(outcomes) // 2], 3) if outcomes else None
            ),
        }

    def progress(outcome: Outcome, done: int, total: int) -> None:
        seen.append(outcome)
        if not outcome.ok:  # at once: a long run shows its failures as they come
            also = f" (also {', '.join(outcome.invariants[1:])})" if len(outcome.invariants) > 1 else ""
            print(f"seed {outcome.seed}: {outcome.violation}{also}", flush=True)
        if done % 100 == 0 or done == total:
            rate = done / (time.perf_counter() - started)
            print(f"  {done}/{total} seeds, {rate:.2f} seeds/s", file=sys.stderr, flush=True)
            if args.json_out is not None:  # kept current, so that a run cut short still leaves its figures
                args.json_out.write_text(json.dumps(summary(seen), indent=2) + "\n")

    outcomes = run_seeds(list(seeds), shape, args.faults, jobs=args.jobs, progress=progress)
    elapsed = time.perf_counter() - started
    failed = [o for o in outcomes if not o.ok]
    churn = sum(o.churn for o in outcomes)
    print(
        f"{len(outcomes)} seeds ({args.shape} shape, faults {args.faults.describe() or 'none'}) in {elapsed:.1f} s: "
        f"{len(outcomes) / elapsed:.2f} seeds/s with {args.jobs} processes; {len(failed)} failed; "
        f"{sum(o.cpu_seconds for o in outcomes):.0f} CPU seconds"
    )
    print(
        f"  {sum(o.admissions for o in outcomes)} admissions, {sum(o.preemptions for o in outcomes)} preemptions, "
        f"churn {churn}, {sum(o.crashes for o in outcomes)} crashes, "
        f"{sum(o.lease_losses for o in outcomes)} leases lost, {sum(o.events for o in outcomes)} events"
    )
    if args.json_out is not None:
        args.json_out.write_text(json.dumps(summary(outcomes), indent=2) + "\n")
    _quiet()
    for i, o in enumerate(failed):
        if i >= SHOWN or args.no_shrink:
            continue  # listed as it came
        case = Case(o.seed, shape, args.faults)
        small, result = shrink(case, o.invariant or "")
        kept = len(result.trail.entries)
        print(f"seed {o.seed} shrunk:")
        print(f"  shrunk to {result.jobs} jobs, faults {small.faults.describe() or 'none'} ({kept} trail entries):")
        print("\n".join(f"  {line}" for line in report_text(result).splitlines()[1:]))
        print(f"  replay: {command(small, args.shape)}")
        print(f"  replay unshrunk: {command(case, args.shape)}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
