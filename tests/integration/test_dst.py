"""Deterministic simulation of the whole daemon against a faulty cluster (issue 24): the world, the invariants, the
CLI, and a few hundred seeds of the harness (`python -m tests.dst`).

Real: the stages (ingest, admit, actuate), the engine, the fold, the SQLite event log (verified and replayed at every
restart), `admitd simulate`. Faked: the cluster (daemon.sim.faulty: latencies, API errors, watch faults, crashes,
deletions and completions, all drawn from a seed on a virtual clock).
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bench.kueue_shapes import Shape, WorkloadClass, scenario
from daemon.domain import events as ev
from daemon.eventlog import LogReader, replay
from daemon.sim import faulty
from daemon.sim.faults import ALL, Faults, parse_faults
from daemon.stages import ingest as stages_ingest
from tests.dst.harness import Case, run_case, run_seeds, shrink
from tests.dst.scenarios import CI, ISSUE, Pick, build, job_plan

ROOT = Path(__file__).resolve().parents[2]
SAMPLES = ROOT / "config" / "samples"

CI_SEEDS = range(1, 201)
"""The seeds every build runs (CI shape, every fault on). Seeds the engine fails on are listed below, not dropped."""

KNOWN_ENGINE_FAILURES: frozenset[int] = frozenset()
"""Seeds of CI_SEEDS that fail `cycle-fixed-point` (and nothing else): the engine's cycle is not a fixed point of its
own output. Each must still fail exactly so: the test says when one stops failing, so that the list shrinks as the
engine is fixed. Empty since issue 23's cycle (one Kueue cycle per pass, a pass's admissions preemption candidates in
the next): seed 88 (at 19181 ms cq-1/medium-21 reclaimed from cq-3/large-17 and cq-3/medium-28 was admitted only by
a fresh cycle on that cycle's output) holds every invariant now."""


BEFORE_HA = ALL.without("lease_loss")
"""`all` as it was before the leader-loses-its-Lease fault: the fault set the older regression seeds were found with
(with a standby running beside the leader, their runs take other turns)."""

ONE_DAEMON_CRASHING = parse_faults("all,crash=0.05,lease-loss=0")
"""Crashes five times as often as in `all`, and no standby: one daemon restarting from its one log."""

HA = parse_faults("all,lease-loss=0.05")
"""Every fault, the Lease lost ten times as often as in `all`: the fault set the HA regression seeds were found with."""


def _invariants(case: Case) -> set[str]:
    return {v.invariant for v in run_case(case).violations}


def test_a_seed_replays_exactly_event_for_event() -> None:
    case = Case(3, CI, parse_faults("all,crash=0.05,api-error=0.2"))
    first, second = run_case(case), run_case(case)
    assert first.trail.entries == second.trail.entries
    assert (first.events, first.crashes, first.api_errors, first.end) == (
        second.events,
        second.crashes,
        second.api_errors,
        second.end,
    )
    assert first.crashes > 0 and first.api_errors > 0  # the faults were on


def test_every_fault_happens_under_all() -> None:
    results = [run_case(Case(seed, CI, parse_faults("all,watch-drop=0.05"))) for seed in range(1, 9)]
    assert all(r.ok for r in results), [str(v) for r in results for v in r.violations]
    assert sum(r.crashes for r in results) > 0
    assert sum(r.api_errors for r in results) > 0
    assert sum(r.timeouts for r in results) > 0
    assert sum(r.relists for r in results) > 0
    assert sum(r.preemptions for r in results) > 0
    assert all(r.finished + r.deleted == r.jobs for r in results)


def test_without_faults_a_seed_admits_every_job_once_and_crashes_never() -> None:
    r = run_case(Case(5, CI, Faults()))
    assert r.ok and r.crashes == 0 and r.finished == r.jobs
    assert r.admissions == r.jobs + r.preemptions  # a preempted job is admitted again, nothing else twice


def test_the_log_of_a_crashing_run_verifies_and_holds_every_decision_carried_out(tmp_path: Path) -> None:
    db = tmp_path / "dst.db"
    faults = ONE_DAEMON_CRASHING  # one daemon: every admission is in this one log
    result = asyncio.run(faulty.run_faulty(build(2, CI), faults, 2, db_path=db, expect_all_end=True))
    assert result.ok and result.crashes > 0
    with LogReader(db) as reader:
        assert reader.check().events == result.events
        state = replay(reader)
        admitted: set[str] = set()
        finished_unadmitted = []
        for e in reader.iter_events():
            if e.type == ev.WorkloadAdmitted.TYPE:
                admitted.add(e.subject)
            elif e.type == ev.JobFinished.TYPE and e.subject not in admitted:
                finished_unadmitted.append(e.subject)
    assert state.outbox == {}  # every decision carried out, failed, or superseded (`not-carried-out` holds)
    assert finished_unadmitted == []  # no job ran to its end without an admission in the log
    assert result.finished + result.deleted == result.jobs


# --- the invariants catch what they are for: each test breaks the daemon on purpose --------------------------------


def test_quota_released_before_the_pods_stop_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """An observer that reports the eviction as soon as a job is suspended (not when its pods are gone)."""
    real = faulty.SimObserver._job

    def early(self: faulty.SimObserver, v: faulty.JobVersion) -> list[ev.Event]:
        rec = self.state.workloads.get(v.key)
        if rec is not None and rec.evicting and v.suspended and v.active and self._first(v.key, ("evicted",)):
            return [ev.WorkloadEvicted(workload=v.key, at=self.clock.now(), reason="Preempted")]
        return real(self, v)

    monkeypatch.setattr(faulty.SimObserver, "_job", early)
    caught = set().union(*(_invariants(Case(seed, CI, parse_faults("evict-latency=30s"))) for seed in range(1, 13)))
    assert caught & {"quota", "running-unadmitted"}, caught


def test_an_outbox_not_resumed_after_a_crash_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    real = faulty._Process.__init__

    def forgetful(self: faulty._Process, *args: object) -> None:
        real(self, *args)  # type: ignore[arg-type]
        if self.incarnation > 1:
            monkeypatch.setattr(self.actuate, "resume", lambda: 0)

    monkeypatch.setattr(faulty._Process, "__init__", forgetful)
    caught = set().union(*(_invariants(Case(seed, CI, ONE_DAEMON_CRASHING)) for seed in range(1, 7)))
    assert "not-carried-out" in caught or "run-ends" in caught, caught


def test_a_change_the_admit_stage_is_not_told_of_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """The ingest stage forgets to wake the admit stage when a job finishes (its quota is free again)."""
    real = stages_ingest.Ingest.step

    async def step(self: stages_ingest.Ingest) -> None:
        finished = any(isinstance(e, ev.JobFinished) for o in self.inbox for e in o.events)
        told = self.on_changed
        if finished:
            self.on_changed = lambda seq: None
        try:
            await real(self)
        finally:
            self.on_changed = told

    monkeypatch.setattr(stages_ingest.Ingest, "step", step)
    caught = set().union(*(_invariants(Case(seed, CI, Faults())) for seed in range(1, 9)))
    assert "not-reconsidered" in caught, caught


def test_a_replay_that_loses_an_order_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    real = faulty.replay

    def lossy(reader: LogReader) -> object:
        state = real(reader)
        if state.outbox:
            state.outbox.pop(sorted(state.outbox)[0])
        return state

    monkeypatch.setattr(faulty, "replay", lossy)
    caught = set().union(*(_invariants(Case(seed, CI, ONE_DAEMON_CRASHING)) for seed in range(1, 9)))
    assert "decision-lost" in caught, caught


def test_shrinking_keeps_the_failure_and_makes_the_case_smaller(monkeypatch: pytest.MonkeyPatch) -> None:
    real = faulty._Process.__init__

    def forgetful(self: faulty._Process, *args: object) -> None:
        real(self, *args)  # type: ignore[arg-type]
        if self.incarnation > 1:
            monkeypatch.setattr(self.actuate, "resume", lambda: 0)

    monkeypatch.setattr(faulty._Process, "__init__", forgetful)
    failing = next(
        Case(seed, CI, ONE_DAEMON_CRASHING)
        for seed in range(1, 20)
        if "not-carried-out" in _invariants(Case(seed, CI, ONE_DAEMON_CRASHING))
    )
    small, result = shrink(failing, "not-carried-out", budget=120)
    assert any(v.invariant == "not-carried-out" for v in result.violations)
    assert small.pick.jobs is not None and len(small.pick.jobs) < CI.jobs
    assert len(small.faults.active()) < len(failing.faults.active())
    assert "crash" in small.faults.active()  # the fault the failure needs is kept
    assert _invariants(small) >= {"not-carried-out"}  # and the shrunk case replays the same way


# --- the CLI ---------------------------------------------------------------------------------------------------------


def _simulate(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "daemon.cli", "simulate", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
        check=False,
    )


def test_simulate_with_faults_reports_the_run_and_its_invariants() -> None:
    out = _simulate(str(SAMPLES / "cohort-borrow-reclaim.yaml"), "--faults", "all", "--seed", "3", "--json")
    assert out.returncode == 0, out.stderr
    body = json.loads(out.stdout)
    assert body["ok"] is True and body["violations"] == []
    assert body["faults"] == ALL.describe()
    assert body["jobs"] == body["finished"] + body["deleted"]
    again = _simulate(str(SAMPLES / "cohort-borrow-reclaim.yaml"), "--faults", "all", "--seed", "3", "--json")
    assert json.loads(again.stdout) == body  # the seed decides everything


def test_simulate_refuses_a_bad_fault_spec_naming_it() -> None:
    out = _simulate(str(SAMPLES / "seed.yaml"), "--faults", "evict-latency=30s,crash=1.5")
    assert out.returncode == 2
    assert "fault spec 'crash=1.5': crash is a rate and must be from 0 to 1 (got 1.5)" in out.stderr


# --- the seeds every build runs --------------------------------------------------------------------------------------


@pytest.mark.timeout(900)  # ~30 s on the 2-core machine when idle; several minutes when other suites share it
def test_ci_seeds_hold_every_invariant() -> None:
    """CI_SEEDS of the CI shape with every fault on, in two processes (measured: bench/RESULTS.md)."""
    started = time.perf_counter()
    outcomes = run_seeds(list(CI_SEEDS), CI, ALL, jobs=2)
    failed = {o.seed: o.invariants for o in outcomes if not o.ok}
    unexpected = {seed: inv for seed, inv in failed.items() if seed not in KNOWN_ENGINE_FAILURES}
    assert not unexpected, {o.seed: o.violation for o in outcomes if o.seed in unexpected}
    assert {seed: failed.get(seed) for seed in KNOWN_ENGINE_FAILURES} == {
        seed: ("cycle-fixed-point",) for seed in KNOWN_ENGINE_FAILURES
    }
    assert len(outcomes) == len(CI_SEEDS)
    assert sum(o.preemptions for o in outcomes) > 0 and sum(o.crashes for o in outcomes) > 0
    assert sum(o.lease_losses for o in outcomes) > 0  # the standby took over, and the invariants held across it
    print(f"{len(outcomes)} seeds in {time.perf_counter() - started:.1f} s")


def test_an_unsuspension_sent_by_a_process_that_died_is_no_eviction_either() -> None:
    """Issue-shape seed 1454 found it: a process sent an unsuspension and crashed; the next one preempted the workload
    and took the Job, still suspended and idle, for evicted; the dead process's patch then started it unadmitted.
    An admission whose unsuspension has no result in the log counts as one on its way after a restart."""
    r = run_case(Case(1454, ISSUE, BEFORE_HA))
    assert r.ok, [str(v) for v in r.violations]


def test_a_seed_whose_waiter_for_leaving_victims_held_its_room_for_the_whole_call_holds_every_invariant() -> None:
    """Issue-shape seed 10 (`all`) found it: after a take-over, three heads waited for the same already-evicting
    workload; the one whose entry overlapped was assessed again a pass later, when a workload that fits only once
    the victims are gone had reserved its room for the rest of the call, so it found no candidates. A fresh cycle
    (without that reservation, which names no victims and so is not kept) preempted one: the engine's output was
    not a fixed point (`cycle-fixed-point`). Such a room is now held for its pass, as Kueue's cycle holds it."""
    r = run_case(Case(10, ISSUE, ALL))
    assert r.ok, [str(v) for v in r.violations]


def test_a_seed_whose_preemptor_needed_more_than_its_kept_victims_holds_every_invariant() -> None:
    """Issue-shape seed 2420 (`all`) found it: waiting preemptors whose victims (already leaving) were no longer
    enough were assessed with those victims gone and waited for one more, but named only the new one; the next
    call handed the old ones to no one, so another queue's waiter took them and a third preempted
    (`cycle-fixed-point`). Such a preemptor now names every victim it waits for."""
    r = run_case(Case(2420, ISSUE, ALL))
    assert r.ok, [str(v) for v in r.violations]


def test_a_seed_whose_sticky_preemptor_waits_for_others_victims_holds_every_invariant() -> None:
    """Issue-shape seed 7437 (`all`) found it: after a take-over, cq-27's two sticky preemptors were medium-95
    (priority 100, its victim gone) and small-56 (priority 50, its victim admitted again). medium-95 fitted only
    once another preemptor's victims were gone, so it held its room pass after pass with the reason "waiting for
    workloads preempted in this cycle", which names no victims and so made it no longer sticky. The next call then
    offered small-56 first and admitted it, and medium-95 preempted in turn (`cycle-fixed-point`). Such a waiter
    now stays sticky (`reasons.still_sticky`), and the next call walks its queue as the last one did."""
    r = run_case(Case(7437, ISSUE, ALL))
    assert r.ok, [str(v) for v in r.violations]


def test_a_seed_whose_preemptor_is_starved_by_a_room_held_for_each_pass_holds_every_invariant() -> None:
    """Issue-shape seed 3295 (`all`) found it: at 20819 ms a call admits cq-17/medium-96 in its first pass; in
    every pass after, cq-27/small-65 (it fits only once this cycle's victims are gone) holds its room for its pass
    and is processed first (lower borrowing), so cq-17/medium-135's preemption of cq-17/small-142 no longer fits
    after it, pass after pass, until the call stops without progress. A fresh call on that output offers
    medium-135 in its first pass, while cq-27 steps over its head cq-27/large-34 again (the engine keeps no
    inadmissible set across calls) and small-65 comes only in the second, and preempts: the admit stage, which ran
    no cycle on its own decisions, left a state a cycle would still act on (`cycle-fixed-point`). The stage now runs
    cycles until one admits and preempts nothing, as Kueue's cycles follow each other."""
    r = run_case(Case(3295, ISSUE, ALL))
    assert r.ok, [str(v) for v in r.violations]


def test_an_unsuspension_of_a_dead_process_landing_after_the_next_ones_suspension_is_waited_out() -> None:
    """Issue-shape seeds 263, 281, 297, 301, 305 and 1989 (of the first 2,000) found it: a workload admitted, its
    unsuspension sent, then preempted before the patch landed, and the process crashed. The outbox held only the
    suspension, so the next process took the still-suspended Job for evicted (quota released, the workload pending
    or admitted again), and the dead process's patch then started it: running unadmitted, or unsuspended twice.
    A suspension that replaced an unsettled unsuspension names it (`Order.supersedes`); after a restart its
    suspension is made again once the old patch can no longer land, and only then is the eviction taken."""
    for seed in (263, 281, 297, 301, 305, 1989):
        r = run_case(Case(seed, ISSUE, BEFORE_HA))
        assert r.ok, (seed, [str(v) for v in r.violations])


def test_a_crash_writes_what_a_step_appended_while_the_log_was_being_written() -> None:
    """CI-shape seeds 37, 133 and 140 found it (after actuation lanes append each result as its call ends): the
    crash's last write yielded to the event loop, an actuation lane whose reply had arrived appended its result
    then, and the process died holding a state one event ahead of its log (`decision-lost`)."""
    for seed in (37, 133, 140):
        r = run_case(Case(seed, CI, BEFORE_HA))
        assert "decision-lost" not in {v.invariant for v in r.violations}, [str(v) for v in r.violations]


def test_seeds_that_found_the_stale_idle_eviction_hold_every_invariant() -> None:
    """CI-shape seeds 88, 184 and 254 found it: a Job seen suspended and idle while its unsuspension was on its way
    was taken for evicted (quota released, the workload admitted again while the earlier patch started it)."""
    for seed in (88, 184, 254):
        r = run_case(Case(seed, CI, BEFORE_HA))
        # The engine's own fixed point (seeds 88 and 254 fail it since the merge with issue 21's quota release,
        # see KNOWN_ENGINE_FAILURES) is not what these seeds test: every invariant of the stages must hold.
        assert {v.invariant for v in r.violations} <= {"cycle-fixed-point"}, [str(v) for v in r.violations]


def test_a_shrunk_case_replays_with_the_pick_it_names() -> None:
    kept_queues, kept_jobs = (0, 1, 2), tuple(range(12))
    r = run_case(Case(7, CI, ALL, Pick(queues=kept_queues, jobs=kept_jobs)))
    plan = job_plan(7, CI)
    assert r.jobs == sum(1 for i in kept_jobs if plan[i][0] in kept_queues)


# --- high availability: a leader loses its Lease to a standby ----------------------------------------------------


def test_a_standby_gives_up_the_unsuspensions_its_log_left_from_an_earlier_term() -> None:
    """Issue-shape seeds 9, 23, 46, 51, 52 and 56 (`HA`) found it: a replica admitted a workload, lost its Lease
    before the unsuspension went out, and came back as a standby with that order still in its outbox; the other
    replica admitted the workload again and started it; when the first took the Lease back it carried out its old
    order, unsuspending a job that already ran for another decision (or beside the jobs admitted into its quota).
    A process that starts as a standby gives up its log's unsettled orders (`daemon.stages.actuate.renounce`)."""
    for seed in (9, 23, 46, 51, 52, 56):
        r = run_case(Case(seed, ISSUE, HA))
        assert r.ok, (seed, [str(v) for v in r.violations])
        assert r.lease_losses > 0


def test_a_leader_evicts_an_adopted_job_the_previous_leader_suspended() -> None:
    """Issue-shape seeds 13 and 181 (`HA`) found it: the leader preempted a job another replica had started and lost
    its Lease while the pods were stopping; the new leader held the job as admitted (adopted), and when the pods
    were gone nothing evicted it: the job stayed suspended, its quota held, and never ran again. A leader now
    treats a job it did not start itself, seen suspended with no pods and with no order of its own on it, as the
    standby does: evicted (`SuspendedByAnotherReplica`)."""
    for seed in (13, 181):
        r = run_case(Case(seed, ISSUE, HA))
        assert r.ok, (seed, [str(v) for v in r.violations])


def test_a_standby_taking_the_lease_over_lists_the_jobs_again_before_it_decides() -> None:
    """Issue-shape seed 48 (`HA`) found it (and 38, before the standby gave its orders up): the old leader started a
    job just before it lost its Lease, the standby's job watch had dropped meanwhile (or lagged), and the standby
    took over holding the job as pending and admitted it again. Taking the Lease over lists the jobs first
    (`Daemon._lead`, `JobWatches.relist`), so the job is adopted."""
    r = run_case(Case(48, ISSUE, HA))
    assert r.ok, [str(v) for v in r.violations]


def test_the_log_side_check_follows_each_replicas_log_on_its_own() -> None:
    """Issue-shape seed 275 (`all`) failed the checker, not the daemon: a replica unsuspended a job and crashed before
    its suspension's answer was logged; the other replica, whose watch never showed the job running, logged no
    suspension either, and its own later unsuspension was taken for a second one. A log is checked against itself;
    the cluster's side (a patch landing on a running job) is checked across replicas."""
    r = run_case(Case(275, ISSUE, ALL))
    assert r.ok, [str(v) for v in r.violations]


def test_a_replica_that_never_saw_a_job_run_charges_its_stopping_pods() -> None:
    """Issue-shape seeds 125 and 520 (`all`) found it: a cohort over what it lends by 1 CPU for a moment. The old
    leader preempted a job and lost its Lease while the pods were stopping (evictions take up to 30 s); the new
    leader's watch had been down for the job's whole run, so its log held the job pending, and the suspension had
    emptied the admission note: nothing said what the stopping pods held, and the leader admitted another workload
    into their room. A preemption now writes the admission as the job's stopping note (`admitd.io/stopping`), and
    a replica that sees a suspended job with pods still stopping and such a note holds its quota (adopted, evicting)
    until they are gone."""
    for seed in (125, 520):
        r = run_case(Case(seed, ISSUE, ALL))
        assert r.ok, (seed, [str(v) for v in r.violations])


def test_a_snapshot_waits_for_the_events_it_covers_to_be_written() -> None:
    """Issue-shape seed 1619 (`all`) found it, in the simulation's log, not the daemon's: a patch's reply was recorded
    while the held appends were being written, so the fold was one event ahead of the log when the snapshot was
    taken, and the log refused it (`snapshot at seq 575 not written: no such event`, a stage raised). A snapshot is
    now taken only at a flush that leaves nothing held."""
    r = run_case(Case(1619, ISSUE, ALL))
    assert r.ok, [str(v) for v in r.violations]


def test_under_eviction_latency_a_queue_taking_back_its_quota_does_not_lend_it_and_reclaim_it_at_once() -> None:
    """Kueue's baseline shape in one Cohort of six queues at 10% (210 Jobs), evictions taking up to 5 s. A queue
    whose borrowed room was reclaimed builds a backlog within its own quota; when its big job finishes, the
    engine used to admit its head within its quota and, in the same pass, other queues' borrowers into the rest of
    the freed room, which its next heads reclaimed a pass later: 64 such evictions for nothing (churn), 86
    preemptions, the last job done at 16.9 s. Borrowers now wait for the passes in which their tree's own queues
    take back their quota (README, `borrowers_after_the_trees_own`)."""
    shape = Shape(
        "one-cohort",
        1,
        6,
        (
            WorkloadClass("small", 35, 1, 50, 200, 100),
            WorkloadClass("medium", 10, 5, 100, 500, 500),
            WorkloadClass("large", 5, 20, 200, 1000, 1200),
        ),
    )
    r = asyncio.run(
        faulty.run_faulty(scenario(shape), Faults(evict_latency=5_000), 1, expect_all_end=True, idle_check=False)
    )
    assert r.ok, [str(v) for v in r.violations]
    assert r.finished == r.jobs == 6 * 50
    assert r.churn == 0, r.churn_by_reason
    assert r.preemptions < 40
