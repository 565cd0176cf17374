"""daemon/metrics on pure inputs: the projections of daemon/views fed events from the builders (no log file, no
simulation), rendered, and parsed by prometheus-client's own parser; the group table, the text helpers, the one
/metrics answer.

Real: the fold, the projections, the engine (`decide`) for pending reasons, the renderer, `prometheus_client.parser`.
Faked: nothing; no SQLite file is opened.
"""

from __future__ import annotations

import asyncio
import math

import pytest
from aiohttp.test_utils import TestClient, TestServer
from prometheus_client.parser import text_string_to_metric_families

from daemon.domain.events import Event, JobFinished, WorkloadAdmitted
from daemon.kube import webhook
from daemon.metrics import LIVE, FoldedMetrics, MetricsNotReady, Renderer, scrape, webhook_requested
from daemon.metrics.families import GROUPS, PER_QUEUE
from daemon.metrics.renderer import GROUP_TEXT, _Context
from daemon.metrics.text import CONTENT_TYPE, esc, num, rename
from daemon.views.kueue_counters import ADMISSION_WAIT_BUCKETS, WAIT_BUCKETS
from tests.unit.builders import World, cohort, cq, flavor, job, lq, namespace, taint
from tests.unit.test_admission import NOW, cycle


class MetricsWorld(World):
    """A World whose events go through the metrics' projections before the state, as both feeders do."""

    def __init__(self) -> None:
        self.fm = FoldedMetrics()
        super().__init__(self.fm.state)

    def _feed(self, event: Event) -> None:
        self.fm.apply(event, self.fm.state.seq + 1)


def samples(text: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[(s.name, frozenset(s.labels.items()))] = s.value
    return out


def value(got: dict[tuple[str, frozenset[tuple[str, str]]], float], name: str, **labels: str) -> float:
    want = set(labels.items())
    found = [v for (n, lab), v in got.items() if n == name and want <= lab]
    assert len(found) == 1, (name, labels, found)
    return found[0]


def base() -> MetricsWorld:
    w = MetricsWorld()
    w.add(flavor("h100"), namespace("default"), lq("default", "q", "a"))
    return w


def test_admissions_and_finishes_move_the_gauges_counters_and_kueues_wait_buckets() -> None:
    w = base()
    w.add(cq("a").flavor("h100", gpu=8), job("j").gpus(2).at(0), job("k").gpus(8).at(0))
    events = cycle(w)
    w.apply(events)
    got = samples(Renderer().render(w.fm).decode())
    assert value(got, "kueue_admitted_active_workloads", cluster_queue="a") == 1
    assert value(got, "kueue_cluster_queue_resource_usage", cluster_queue="a", flavor="h100") == 2
    assert value(got, "kueue_pending_workloads", cluster_queue="a", status="inadmissible") == 1
    assert value(got, "kueue_unadmitted_workloads", cluster_queue="a", underlying_cause="WaitingForQuota") == 1
    assert value(got, "kueue_admitted_workloads_total", cluster_queue="a", priority_class="") == 1
    # Kueue v0.17's buckets: 1, 2.5, 5, ... 40960 s (16) for the admission wait, ... 10240 s (14) for the quota
    # reservation's; the wait from creation (0) to the cycle's NOW.
    waited = next(e for e in events if isinstance(e, WorkloadAdmitted)).at / 1000
    for family, buckets in (
        ("kueue_admission_wait_time_seconds", ADMISSION_WAIT_BUCKETS),
        ("kueue_quota_reserved_wait_time_seconds", WAIT_BUCKETS),
    ):
        les = {lab["le"] for (n, fs), _ in got.items() if n == f"{family}_bucket" for lab in [dict(fs)]}
        assert les == {num(b) for b in buckets} | {"+Inf"}, family
        for le in buckets:
            assert value(got, f"{family}_bucket", cluster_queue="a", le=num(le)) == (1 if waited <= le else 0)
    assert ADMISSION_WAIT_BUCKETS[:3] == (1.0, 2.5, 5.0) and ADMISSION_WAIT_BUCKETS[-1] == 40960.0
    assert len(ADMISSION_WAIT_BUCKETS) == 16 and len(WAIT_BUCKETS) == 14 and WAIT_BUCKETS[-1] == 10240.0
    w.apply([JobFinished(job="default/j", at=10_000_000, succeeded=True)])
    got = samples(Renderer().render(w.fm).decode())
    assert value(got, "kueue_admitted_active_workloads", cluster_queue="a") == 0
    assert value(got, "kueue_cluster_queue_resource_usage", cluster_queue="a", flavor="h100") == 0
    assert value(got, "kueue_finished_workloads_total", cluster_queue="a", priority_class="") == 1


@pytest.mark.parametrize(
    ("items", "name"),
    [
        ((cohort("x").parent("y"), cohort("y").parent("x"), cq("a").cohort("x").flavor("h100", gpu=8)), "cycle"),
        ((cq("a").flavor("h100", gpu=8).stop(),), "stopped"),
        ((cq("a").flavor("nowhere", gpu=8),), "missing flavor"),
    ],
)
def test_a_clusterqueue_that_cannot_admit_is_pending_on_metrics_as_in_its_view(
    items: tuple[object, ...], name: str
) -> None:
    w = base()
    w.add(*items, job("j").gpus(1))
    w.apply(cycle(w))
    got = samples(Renderer().render(w.fm).decode())
    assert w.fm.queues.activity("a").active is False, name
    assert value(got, "kueue_cluster_queue_status", cluster_queue="a", status="pending") == 1
    assert value(got, "kueue_cluster_queue_status", cluster_queue="a", status="active") == 0
    assert value(got, "kueue_admitted_active_workloads", cluster_queue="a") == 0
    counts = w.fm.queues.pending_counts("a")
    assert value(got, "kueue_pending_workloads", cluster_queue="a", status="inadmissible") == counts.inadmissible == 1


def test_unadmitted_workloads_are_counted_by_kueues_underlying_cause_under_the_reason_no_reservation() -> None:
    """Kueue v0.19's kueue_unadmitted_workloads{cluster_queue,reason,underlying_cause}: `reason` is the Admitted
    condition's (NoReservation: no quota reserved), `underlying_cause` the QuotaReserved condition's granular reason,
    as the status writer puts it on each Workload (`domain.reasons`)."""
    w = base()
    w.add(
        flavor("spot", taints=[taint("spot")]),
        lq("default", "s", "stopped"),
        lq("default", "t", "tainted"),
        cq("a").flavor("h100", gpu=8),
        cq("tainted").flavor("spot", gpu=8),
        cq("stopped").flavor("h100", gpu=8).stop(),
        job("runs").gpus(2).at(0),
        job("full").gpus(8).at(0),
        job("also-full").gpus(7).at(0),
        job("huge").gpus(16).at(0),
        job("picky").queue("t").gpus(1).at(0),  # tolerates no taint of the only flavor
        job("held").queue("s").gpus(1).at(0),
    )
    w.apply(cycle(w))
    w.add(job("late").gpus(1).at(5))  # not evaluated by a cycle yet
    got = samples(Renderer().render(w.fm).decode())
    found = {
        (dict(lab)["cluster_queue"], dict(lab)["reason"], dict(lab)["underlying_cause"]): v
        for (n, lab), v in got.items()
        if n == "kueue_unadmitted_workloads"
    }
    assert found == {
        ("a", "NoReservation", "WaitingForQuota"): 2,
        ("a", "NoReservation", "ExceedsMaxQuota"): 1,
        ("tainted", "NoReservation", "NoMatchingFlavor"): 1,
        ("a", "NoReservation", "PendingEvaluation"): 1,
        ("stopped", "NoReservation", "Suspended"): 1,
    }
    for name in ("a", "stopped", "tainted"):  # every pending workload once, as kueue_pending_workloads counts them
        assert sum(v for (q, _, _), v in found.items() if q == name) == w.fm.queues.pending_counts(name).total


def test_each_group_renders_its_own_families_only() -> None:
    w = base()
    w.add(cq("a").flavor("h100", gpu=8), job("j").gpus(2))
    w.apply(cycle(w))
    renderer = Renderer()
    renderer.refresh(w.fm)
    assert GROUP_TEXT.keys() == GROUPS.keys()
    assert {f for fams in GROUPS.values() for f in fams} == {f.name for f in PER_QUEUE}
    ctx = _Context(w.fm, renderer.role)
    for group, families in GROUPS.items():
        texts = GROUP_TEXT[group](renderer, ctx, "a", w.fm.state.cluster_queues["a"])
        assert set(texts) <= set(families), group
        for fam, text in texts.items():
            assert all(line.startswith(fam.encode()) for line in text.splitlines()), (group, fam)


def test_the_text_helpers() -> None:
    assert esc('a"b\\c\nd') == 'a\\"b\\\\c\\nd'
    assert num(2) == "2.0" and num(math.inf) == "+Inf" and num(math.nan) == "NaN" and num(0.25) == "0.25"
    assert rename(b"old_x 1\nold_x 2\n", b"old_x", b"new_y") == b"new_y 1\nnew_y 2\n"
    assert rename(b"", b"old", b"new") == b""


def test_one_answer_for_both_servers() -> None:
    assert scrape(lambda: b"x 1\n") == (200, b"x 1\n", CONTENT_TYPE)

    def not_ready() -> bytes:
        raise MetricsNotReady("not ready: folding; scrape again")

    def broken() -> bytes:
        raise ValueError("boom")

    status, body, _ = scrape(not_ready)
    assert status == 503 and b"scrape again" in body
    status, body, _ = scrape(broken)
    assert status == 500 and b"rendering metrics failed: boom" in body


def test_webhook_requests_are_counted_by_path_and_status() -> None:
    """The webhook server reports each answered request (path, HTTP status, seconds) to
    `metrics.webhook_requested`, which feeds controller-runtime's two webhook families."""
    seen: list[tuple[str, int]] = []

    def requested(path: str, code: int, seconds: float) -> None:
        assert seconds >= 0
        seen.append((path, code))
        webhook_requested(path, code, seconds)

    app = webhook.routes({"/echo": lambda body: body}, requested=requested)

    async def ask() -> None:
        async with TestClient(TestServer(app)) as client:
            assert (await client.post("/echo", data=b"not json")).status == 400
            assert (await client.post("/echo", json={"a": 1})).status == 200

    before = LIVE.get_sample_value("controller_runtime_webhook_requests_total", {"webhook": "/echo", "code": "200"})
    asyncio.run(ask())
    assert seen == [("/echo", 400), ("/echo", 200)]
    after = LIVE.get_sample_value("controller_runtime_webhook_requests_total", {"webhook": "/echo", "code": "200"})
    assert after == (before or 0) + 1
    assert LIVE.get_sample_value("controller_runtime_webhook_latency_seconds_count", {"webhook": "/echo"}) == 2


def test_the_replica_role_follows_the_process_and_every_label_changes_with_it() -> None:
    w = base()
    w.add(cq("a").flavor("h100", gpu=8), job("j").gpus(2))
    w.apply(cycle(w))
    renderer = Renderer("leader")
    assert 'replica_role="leader"' in renderer.render(w.fm).decode()
    renderer.set_role("follower")
    text = renderer.render(w.fm).decode()
    assert 'replica_role="leader"' not in text and 'replica_role="follower"' in text
    assert text == Renderer("follower").render(w.fm).decode()


def test_the_quota_reservation_waits_are_the_admission_waits_in_kueues_14_buckets() -> None:
    """The counters observe each admission's wait once, in admission_wait's 16 buckets; the quota reservation's
    histograms (the ClusterQueue's and the LocalQueue's, 14 buckets, the first 14 of those) are the same
    observations: each bucket counts the waits at most its bound, an edge in the bucket it bounds, a wait above the
    14th bound (and above the 16th) only in +Inf, the sum and the count."""
    waits_s = [0.5, 1.0, 2.5, 7.0, 640.0, 10240.0, 10241.0, 40960.0, 50000.0]
    w = base()
    w.add(cq("a").flavor("h100", gpu=8 * len(waits_s)))
    w.add(*(job(f"j{i}").gpus(1).at(NOW - int(s * 1000)) for i, s in enumerate(waits_s)))
    w.apply(cycle(w))
    renderer = Renderer(local_queue_metrics=True)
    got = samples(renderer.render(w.fm).decode())
    assert value(got, "kueue_admitted_workloads_total", cluster_queue="a", priority_class="") == len(waits_s)
    for family, buckets, labels in (
        ("kueue_admission_wait_time_seconds", ADMISSION_WAIT_BUCKETS, {"cluster_queue": "a"}),
        ("kueue_quota_reserved_wait_time_seconds", WAIT_BUCKETS, {"cluster_queue": "a"}),
        ("kueue_local_queue_admission_wait_time_seconds", WAIT_BUCKETS, {"name": "q", "namespace": "default"}),
        ("kueue_local_queue_quota_reserved_wait_time_seconds", WAIT_BUCKETS, {"name": "q", "namespace": "default"}),
    ):

        def one(metric: str, labels: dict[str, str] = labels, **more: str) -> float:
            want = set(labels.items()) | set(more.items())
            found = [v for (n, lab), v in got.items() if n == metric and want <= lab]
            assert len(found) == 1, (metric, want, found)
            return found[0]

        for le in buckets:
            want = sum(1 for s in waits_s if s <= le)
            assert one(f"{family}_bucket", le=num(le)) == want, (family, le)
        assert one(f"{family}_bucket", le="+Inf") == len(waits_s), family
        assert one(f"{family}_count") == len(waits_s), family
        assert math.isclose(one(f"{family}_sum"), sum(waits_s)), family
    assert w.fm.counters.qr_wait_of(("a", "")).per == w.fm.counters.wait[("a", "")].per[: len(WAIT_BUCKETS)]
