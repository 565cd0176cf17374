"""bench/e2e/churn.py: the preemptions of a run read from its exported event log (synthetic events)."""

from __future__ import annotations

from typing import Any

import pytest

from bench.e2e.churn import churn, klass


def _observed(seq: int, key: str, at: int) -> dict[str, Any]:
    ns, name = key.split("/")
    return {
        "seq": seq,
        "type": "job.observed",
        "recorded_at": at,
        "payload": {"workload": {"namespace": ns, "name": name}},
    }


def _admitted(seq: int, key: str, at: int, *, borrowed: bool = False) -> dict[str, Any]:
    borrowed_list = [{"flavor": "rf", "resource": "cpu", "amount": 100}] if borrowed else []
    return {"seq": seq, "type": "workload.admitted", "recorded_at": at,
            "payload": {"workload": key, "at": at, "borrowed": borrowed_list}}  # fmt: skip


def _unsuspended(seq: int, key: str, decision: int, at: int) -> dict[str, Any]:
    return {"seq": seq, "type": "job.unsuspended", "recorded_at": at, "payload": {"job": key, "decision": decision}}


def _preempted(seq: int, victim: str, preemptor: str, at: int, reason: str, policy: str) -> dict[str, Any]:
    payload = {"workload": victim, "preemptor": preemptor, "at": at, "reason": reason, "policy": policy}
    return {"seq": seq, "type": "workload.preempted", "recorded_at": at, "payload": payload}


IN_CQ = ("InClusterQueue", "withinClusterQueue=LowerPriority")
RECLAIM = ("InCohortReclamation", "reclaimWithinCohort=Any")


def test_preemptions_by_rule_and_whether_the_victim_had_started_and_its_preemptor_was_waiting() -> None:
    events = [
        _observed(1, "q1/small-0-0-0", 1000),
        _admitted(2, "q1/small-0-0-0", 1000),
        _unsuspended(3, "q1/small-0-0-0", 2, 1100),
        _observed(4, "q1/large-2-0-0", 1500),  # arrives after the small one's admission
        _preempted(5, "q1/small-0-0-0", "q1/large-2-0-0", 1500, *IN_CQ),
        _observed(6, "q2/medium-1-0-0", 2000),  # waiting already when the next small one is admitted
        _observed(7, "q1/small-0-1-0", 2100),
        _admitted(8, "q1/small-0-1-0", 2100, borrowed=True),
        _unsuspended(9, "q1/small-0-1-0", 8, 2200),
        _preempted(10, "q1/small-0-1-0", "q2/medium-1-0-0", 3100, *RECLAIM),
        _observed(11, "q1/small-0-2-0", 3200),
        _admitted(12, "q1/small-0-2-0", 3200),  # preempted before its unsuspend: it had not started
        _preempted(13, "q1/small-0-2-0", "q1/large-2-0-0", 3300, *IN_CQ),
    ]
    c = churn(events)
    assert c["preemptions"] == 3
    assert c["by_rule"] == {"InClusterQueue (withinClusterQueue=LowerPriority)": 2,
                            "InCohortReclamation (reclaimWithinCohort=Any)": 1}  # fmt: skip
    assert c["by_classes"] == {"large over small": 2, "medium over small": 1}
    s = c["of_started_victims"]
    assert s["preemptions"] == 2
    assert s["preemptor_observed_before_the_victims_admission"] == {
        "preemptor later": 1,
        "preemptor waiting already": 1,
    }
    assert s["victim_borrowed_when_admitted_by_rule"] == {"InCohortReclamation (reclaimWithinCohort=Any)": 1}
    assert s["victim_admission_to_preemption_s"] == {"median": 0.75, "p90": 1.0}  # 0.5 and 1.0 s
    assert c["victim_admission_to_preemption_s"]["median"] == 0.5


def test_a_readmitted_victim_counts_as_started_only_for_the_admission_its_unsuspend_carried_out() -> None:
    events = [
        _admitted(1, "q/small-0-0-0", 0),
        _unsuspended(2, "q/small-0-0-0", 1, 10),
        _admitted(3, "q/small-0-0-0", 500),  # a later admission, not yet carried out
        _preempted(4, "q/small-0-0-0", "q/large-2-0-0", 600, *IN_CQ),
    ]
    assert churn(events)["of_started_victims"]["preemptions"] == 0


def test_a_preemption_without_an_admission_is_refused_and_classes_come_from_the_name() -> None:
    with pytest.raises(ValueError, match="without an admission"):
        churn([_preempted(1, "q/small-0-0-0", "q/large-2-0-0", 0, *IN_CQ)])
    assert klass("cq-0-1-cohort-0/medium-1-12-0") == "medium"
