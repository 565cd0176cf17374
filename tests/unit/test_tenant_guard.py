"""What a tenant who may create and patch Jobs cannot do, without a cluster: the signed admission note
(`daemon.domain.trust`), the validating webhook's decision (`daemon.kube.guard`), who changed a job
(`observe.last_manager`), the observer's security events and the fold's record of them.

Real: the trust and guard functions, the Observer, the fold (`State`), the actuator against a JSON-patch
interpreter (`PatchingClient`). Faked: the API server and its objects (dicts in the API's shape), the clock.
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer

from daemon.domain import events as ev
from daemon.domain.actuation import ADMISSION_ANNOTATION, admission_note, unsuspend_order
from daemon.domain.state import State
from daemon.domain.trust import SIGNATURE_ANNOTATION, judge_claim, sign, signed
from daemon.kube.actuate import JobActuator
from daemon.kube.guard import queue_name_problem, refusal, validation_response
from daemon.kube.observe import Observer, last_manager
from daemon.kube.webhook import (
    VALIDATE_JOBS_PATH,
    VALIDATING,
    not_admitd,
    registration_patch,
    routes,
    webhook_configuration,
)
from daemon.stages.ports import Done, Observed
from tests.samples import admission, workload
from tests.unit.test_kube_border import KEY, raw_job, signed_note
from tests.unit.test_kube_distributed import PatchingClient

SERVICE = ("admitd-system", "admitd-webhook", 443)
ADMITD = frozenset({"system:serviceaccount:admitd-system:admitd"})
TENANT = "system:serviceaccount:research:tenant"
NOTE = admission_note(admission(cq="team-research"), 42, at=1_000)


# --- the signature ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("uid", "note", "signature", "evicted_at", "problem"),
    [
        pytest.param("uid-1", NOTE, None, None, "admission-signature annotation is missing", id="no signature"),
        pytest.param("uid-1", NOTE, "00" * 32, None, "was not written by admitd", id="a made-up signature"),
        pytest.param(
            "uid-1",
            NOTE.replace("team-research", "team-other"),
            sign(KEY, "uid-1", NOTE),
            None,
            "was not written by admitd",
            id="another queue under a copied signature",
        ),
        pytest.param("uid-2", NOTE, sign(KEY, "uid-1", NOTE), None, "uid uid-2", id="copied from another Job"),
        pytest.param("uid-1", NOTE, sign(b"x" * 32, "uid-1", NOTE), None, "not written", id="another key"),
        pytest.param(
            "uid-1", NOTE, sign(KEY, "uid-1", NOTE), 1_000, "ended when the workload stopped at 1000", id="put back"
        ),
    ],
)
def test_a_claim_admitd_did_not_make_or_that_ended_is_refused_with_why(
    uid: str, note: str, signature: str | None, evicted_at: int | None, problem: str
) -> None:
    claim = judge_claim(key=KEY, uid=uid, note=note, signature=signature, workload=workload(), evicted_at=evicted_at)
    assert isinstance(claim, str) and problem in claim


def test_admitds_own_signed_note_is_its_admission_and_a_later_one_survives_an_earlier_stop() -> None:
    for evicted_at in (None, 999):
        claim = judge_claim(
            key=KEY,
            uid="uid-1",
            note=NOTE,
            signature=sign(KEY, "uid-1", NOTE),
            workload=workload(),
            evicted_at=evicted_at,
        )
        assert claim == admission(cq="team-research")
    assert signed(KEY, "uid-1", NOTE, sign(KEY, "uid-1", NOTE))
    assert not signed(KEY, "uid-1", NOTE + " ", sign(KEY, "uid-1", NOTE))


async def test_the_admission_patch_signs_the_note_for_the_jobs_uid() -> None:
    job = raw_job(suspend=True, annotations={ADMISSION_ANNOTATION: ""})
    client = PatchingClient(job)
    actuator = JobActuator(client, lambda uid, note: sign(KEY, uid, note))  # type: ignore[arg-type]
    order = unsuspend_order(replace(workload(), uid="uid-1"), admission(), {}, decision=7, at=1_234)
    assert order.note == admission_note(admission(), 7, at=1_234)
    assert await actuator.carry_out(order) == Done()
    notes = client.obj["metadata"]["annotations"]
    assert client.obj["spec"]["suspend"] is False
    assert notes[SIGNATURE_ANNOTATION] == sign(KEY, "uid-1", order.note)
    assert (
        judge_claim(
            key=KEY,
            uid="uid-1",
            note=notes[ADMISSION_ANNOTATION],
            signature=notes[SIGNATURE_ANNOTATION],
            workload=workload(),
            evicted_at=None,
        )
        == admission()
    )


# --- the validating webhook ---------------------------------------------------------------------------------------


def _request(operation: str, obj: dict[str, Any], old: dict[str, Any] | None = None, user: str = TENANT) -> Any:
    return {
        "uid": "r-1",
        "operation": operation,
        "namespace": "research",
        "object": obj,
        "oldObject": old,
        "userInfo": {"username": user},
    }


def _job(*, suspend: bool, notes: dict[str, str] | None = None, queue: str = "research-queue") -> dict[str, Any]:
    job = raw_job(suspend=suspend, annotations={ADMISSION_ANNOTATION: "", **(notes or {})})
    job["metadata"]["labels"] = {"kueue.x-k8s.io/queue-name": queue}
    return job


CASES = [
    pytest.param(
        _request("CREATE", _job(suspend=True, notes={ADMISSION_ANNOTATION: NOTE})),
        "metadata.annotations[admitd.io/admission]",
        id="create with a forged admission",
    ),
    pytest.param(
        _request("CREATE", _job(suspend=False)),
        "spec.suspend: a queued job is created suspended",
        id="create unsuspended (the mutating webhook bypassed)",
    ),
    pytest.param(
        _request("UPDATE", _job(suspend=False), _job(suspend=True)),
        "spec.suspend: only admitd unsuspends a queued job",
        id="self-unsuspend",
    ),
    pytest.param(
        _request("UPDATE", _job(suspend=True, notes=signed_note(NOTE)), _job(suspend=True)),
        "metadata.annotations[admitd.io/admission, admitd.io/admission-signature]",
        id="a saved signed note put back",
    ),
    pytest.param(
        _request("UPDATE", _job(suspend=True, notes={"admitd.io/full-parallelism": "8"}), _job(suspend=True)),
        "admitd.io/full-parallelism",
        id="any admitd.io annotation",
    ),
    pytest.param(
        _request(
            "UPDATE",
            {**_job(suspend=False), "metadata": {**_job(suspend=False)["metadata"], "labels": {}}},
            _job(suspend=True),
        ),
        "spec.suspend",
        id="unsuspend while dropping the queue label",
    ),
]


@pytest.mark.parametrize(("request_", "field"), CASES)
def test_a_tenant_cannot_write_a_queued_jobs_admission_state(request_: Any, field: str) -> None:
    refused = refusal(request_, admitd=ADMITD)
    assert refused is not None
    code, message = refused
    assert code == 403 and field in message
    assert TENANT in message and "is not admitd" in message and "research/train-a" in message
    answer = validation_response({"request": request_}, admitd=ADMITD)["response"]
    assert answer == {
        "uid": "r-1",
        "allowed": False,
        "status": {"code": 403, "reason": "Forbidden", "message": message},
    }


@pytest.mark.parametrize(("request_", "field"), CASES)
def test_admitds_own_identity_may_do_each_of_those(request_: Any, field: str) -> None:
    assert refusal({**request_, "userInfo": {"username": next(iter(ADMITD))}}, admitd=ADMITD) is None


@pytest.mark.parametrize(
    "request_",
    [
        pytest.param(_request("CREATE", _job(suspend=True)), id="a queued job created suspended"),
        pytest.param(_request("UPDATE", _job(suspend=True), _job(suspend=False)), id="a tenant suspends their job"),
        pytest.param(
            _request(
                "UPDATE", _job(suspend=False, notes=signed_note(NOTE)), _job(suspend=False, notes=signed_note(NOTE))
            ),
            id="an unrelated change to an admitted job",
        ),
        pytest.param(
            _request(
                "UPDATE",
                _job(suspend=True),
                {**_job(suspend=True), "metadata": {**_job(suspend=True)["metadata"], "annotations": {}}},
            ),
            id="an empty admitd.io annotation is an absent one",
        ),
        pytest.param(
            _request("CREATE", {**_job(suspend=False), "metadata": {"name": "x", "namespace": "research"}}),
            id="an unqueued job",
        ),
    ],
)
def test_what_a_tenant_may_still_do(request_: Any) -> None:
    assert refusal(request_, admitd=ADMITD) is None


def test_a_job_the_fold_holds_is_guarded_even_without_its_label() -> None:
    unlabelled = {**_job(suspend=False), "metadata": {**_job(suspend=False)["metadata"], "labels": {}}}
    old = {**unlabelled, "spec": {**unlabelled["spec"], "suspend": True}}
    request_ = _request("UPDATE", unlabelled, old)
    assert refusal(request_, admitd=ADMITD) is None
    assert refusal(request_, admitd=ADMITD, held=lambda key: key == "research/train-a") is not None


@pytest.mark.parametrize(
    ("queue", "valid"),
    [
        ("research-queue", True),
        ("a.b-c", True),
        ("Research", False),
        ("under_score", False),
        ("-lead", False),
        ("trail.", False),
        ("", False),
    ],
)
def test_a_queue_name_must_be_a_dns_1123_subdomain_as_kueue_says(queue: str, valid: bool) -> None:
    assert (queue_name_problem(queue) is None) == valid
    refused = refusal(_request("CREATE", _job(suspend=True, queue=queue), user=next(iter(ADMITD))), admitd=ADMITD)
    if valid:
        assert refused is None
    else:
        assert refused is not None and refused[0] == 422
        assert f'metadata.labels[kueue.x-k8s.io/queue-name]: Invalid value: "{queue}"' in refused[1]


def test_a_job_keeping_an_invalid_queue_name_is_not_refused_again() -> None:
    bad = _job(suspend=True, queue="Bad_Name")
    assert refusal(_request("UPDATE", bad, bad), admitd=ADMITD) is None


def test_the_validating_configuration_matches_the_mutating_one_on_create_and_update() -> None:
    mutating = webhook_configuration(b"ca", url="https://127.0.0.1:9443", service=None, failure_policy="Fail")
    validating = webhook_configuration(
        b"ca", url="https://127.0.0.1:9443", service=None, failure_policy="Fail", hook=VALIDATING
    )
    assert validating["kind"] == "ValidatingWebhookConfiguration"
    assert validating["metadata"]["name"] == "admitd"
    (hook,) = validating["webhooks"]
    assert hook["name"] == "vjob.admitd.io"
    assert hook["clientConfig"]["url"] == "https://127.0.0.1:9443" + VALIDATE_JOBS_PATH
    assert hook["failurePolicy"] == "Fail"
    assert hook["objectSelector"] == mutating["webhooks"][0]["objectSelector"]
    assert {r["resources"][0] for r in hook["rules"]} == {"jobs", "pytorchjobs", "rayjobs", "jobsets"}
    assert all(r["operations"] == ["CREATE", "UPDATE"] for r in hook["rules"])
    assert "matchConditions" not in hook
    (exempt,) = not_admitd(["system:serviceaccount:admitd-system:admitd", "o'brien"])
    assert exempt == {
        "name": "not-admitd",
        "expression": "!(request.userInfo.username in ['o\\'brien', 'system:serviceaccount:admitd-system:admitd'])",
    }
    with_exempt = webhook_configuration(
        b"ca", url=None, service=SERVICE, failure_policy="Fail", hook=VALIDATING, match_conditions=[exempt]
    )
    assert with_exempt["webhooks"][0]["matchConditions"] == [exempt]
    assert with_exempt["webhooks"][0]["clientConfig"]["service"]["path"] == VALIDATE_JOBS_PATH


def test_the_registration_patch_sets_and_removes_the_exemption() -> None:
    shipped = webhook_configuration(b"", url=None, service=SERVICE, failure_policy="Fail", hook=VALIDATING)
    (exempt,) = not_admitd(["system:serviceaccount:admitd-system:admitd"])
    args = {"url": None, "service": SERVICE, "failure_policy": "Fail", "namespaces": None}
    ops = registration_patch(shipped, VALIDATING, b"ca", **args, match_conditions=[exempt])  # type: ignore[arg-type]
    assert {"op": "add", "path": "/webhooks/0/matchConditions", "value": [exempt]} in ops
    live = {**shipped, "webhooks": [{**shipped["webhooks"][0], "matchConditions": [exempt]}]}
    assert not [
        o
        for o in registration_patch(live, VALIDATING, b"ca", **args, match_conditions=[exempt])
        if "match" in o["path"]
    ]  # type: ignore[arg-type]
    assert {"op": "remove", "path": "/webhooks/0/matchConditions"} in registration_patch(
        live, VALIDATING, b"ca", **args
    )  # type: ignore[arg-type]


# --- who changed it -----------------------------------------------------------------------------------------------


def _entry(manager: str, time: str, fields: dict[str, Any]) -> dict[str, Any]:
    return {"manager": manager, "operation": "Update", "time": time, "fieldsType": "FieldsV1", "fieldsV1": fields}


def test_who_changed_it_is_the_newest_manager_of_the_suspension_or_an_admitd_annotation() -> None:
    job = raw_job(suspend=False)
    job["metadata"]["managedFields"] = [
        _entry("kubectl-create", "2026-12-01T00:00:00Z", {"f:spec": {"f:suspend": {}, "f:parallelism": {}}}),
        _entry("kubectl-patch", "2026-12-01T00:00:05Z", {"f:spec": {"f:suspend": {}}}),
        _entry("kube-controller-manager", "2026-12-01T00:00:09Z", {"f:status": {"f:active": {}}}),
    ]
    assert last_manager(job, "/spec/suspend") == "kubectl-patch"
    job["metadata"]["managedFields"].append(
        _entry(
            "kubectl-annotate", "2026-12-01T00:00:07Z", {"f:metadata": {"f:annotations": {"f:admitd.io/admission": {}}}}
        )
    )
    assert last_manager(job, "/spec/suspend") == "kubectl-annotate"
    pytorch = {"metadata": {"managedFields": [_entry("m", "t", {"f:spec": {"f:runPolicy": {"f:suspend": {}}}})]}}
    assert last_manager(pytorch, "/spec/runPolicy/suspend") == "m"
    assert last_manager(raw_job(suspend=False), "/spec/suspend") is None


# --- the observer and the fold ------------------------------------------------------------------------------------


def _observer(state: State, *, leader: bool = True) -> tuple[Observer, list[Observed], list[str]]:
    put: list[Observed] = []
    suspended: list[str] = []
    observer = Observer(
        state,
        put.append,
        clock=type("C", (), {"now": lambda self: 5_000})(),
        on_started_unsuspended=lambda key, *_: suspended.append(key),
        is_leader=lambda: leader,
        admission_key=KEY,
    )
    return observer, put, suspended


def _fold(state: State, put: list[Observed]) -> list[ev.Event]:
    events = [e for o in put for e in o.events]
    for event in events:
        state.apply(event, state.seq + 1)
    put.clear()
    return events


def test_a_forged_admission_is_a_security_event_with_who_and_the_job_holds_no_quota() -> None:
    state = State()
    observer, put, suspended = _observer(state)
    forged = raw_job(suspend=False, annotations={ADMISSION_ANNOTATION: NOTE})
    forged["metadata"]["generation"] = 2
    forged["metadata"]["managedFields"] = [
        _entry("kubectl-patch", "2026-12-01T00:00:05Z", {"f:spec": {"f:suspend": {}}})
    ]
    observer.job_event("ADDED", forged)
    observed, tampered = _fold(state, put)
    assert isinstance(observed, ev.JobObserved)
    assert tampered == ev.JobTampered(
        job="research/train-a",
        namespace="research",
        uid="uid-1",
        generation=2,
        at=5_000,
        what="ForgedAdmission",
        detail="admitd.io/admission is not admitd's: its admitd.io/admission-signature annotation is missing: "
        "admitd signs every admission it writes",
        manager="kubectl-patch",
        claimed_cluster_queue="team-research",
    )
    assert suspended == ["research/train-a"]
    assert state.workloads["research/train-a"].admission is None, "no quota for a claim"
    assert state.tampered == {"research/train-a": ("uid-1", 2)}
    observer.job_event("MODIFIED", forged)  # seen again (a restart's list): suspended again, not recorded again
    assert put == [] and suspended == ["research/train-a"] * 2
    again = json.loads(json.dumps(forged))
    again["metadata"]["generation"] = 4  # suspended, then unsuspended once more: a new change, a new record
    observer.job_event("MODIFIED", again)
    (second,) = _fold(state, put)
    assert isinstance(second, ev.JobTampered) and second.generation == 4


def test_a_saved_signed_note_put_back_after_its_admission_ended_is_not_adopted() -> None:
    state = State()
    observer, put, suspended = _observer(state, leader=False)
    observer.job_event("ADDED", raw_job(suspend=False, annotations=signed_note(NOTE)))
    assert [type(e) for e in _fold(state, put)] == [ev.JobObserved, ev.WorkloadAdopted]
    observer.job_event("MODIFIED", raw_job(suspend=True, annotations={ADMISSION_ANNOTATION: ""}))
    assert [type(e) for e in _fold(state, put)] == [ev.WorkloadEvicted]  # the leader stopped it (at 5,000)
    observer.job_event("MODIFIED", raw_job(suspend=False, annotations=signed_note(NOTE)))
    (tampered,) = _fold(state, put)
    assert isinstance(tampered, ev.JobTampered) and "ended when the workload stopped at 5000" in tampered.detail
    assert state.workloads["research/train-a"].admission is None
    assert suspended == [], "a standby records, the leader suspends"


def test_the_tampering_record_survives_a_snapshot_and_goes_with_the_job() -> None:
    state = State()
    observer, put, _ = _observer(state)
    observer.job_event("ADDED", raw_job(suspend=False))
    _fold(state, put)
    assert State.from_snapshot(state.to_snapshot()).tampered == state.tampered == {"research/train-a": ("uid-1", 0)}
    state.apply(ev.JobDeleted(job="research/train-a", at=6_000), state.seq + 1)
    assert state.tampered == {}


async def test_the_validating_route_answers_an_admission_review() -> None:
    app = routes(validate=lambda review: validation_response(review, admitd=ADMITD))
    async with TestClient(TestServer(app)) as client:
        review = {"request": _request("UPDATE", _job(suspend=False), _job(suspend=True))}
        answer = await client.post(VALIDATE_JOBS_PATH, json=review)
        body = await answer.json()
    assert body["response"]["allowed"] is False and "only admitd unsuspends" in body["response"]["status"]["message"]


def test_an_older_version_seen_after_a_newer_one_is_not_a_tenants_doing() -> None:
    """The watch may deliver this replica's own unsuspension after the API server's answer to the suspension that
    undid it (and after the eviction was recorded): that older version is no security event."""
    state = State()
    observer, put, suspended = _observer(state)
    newer = raw_job(suspend=True, annotations={ADMISSION_ANNOTATION: ""})
    newer["metadata"]["resourceVersion"] = "20"
    observer.job_event("MODIFIED", newer)
    _fold(state, put)
    older = raw_job(suspend=False, annotations=signed_note(NOTE))
    older["metadata"]["resourceVersion"] = "19"
    observer.job_event("MODIFIED", older)
    assert put == [] and suspended == []
    later = raw_job(suspend=False, annotations={ADMISSION_ANNOTATION: ""})
    later["metadata"]["resourceVersion"] = "21"  # newer than any seen: a tenant's unsuspension
    observer.job_event("MODIFIED", later)
    assert [type(e) for o in put for e in o.events] == [ev.JobTampered]
    assert suspended == ["research/train-a"]
