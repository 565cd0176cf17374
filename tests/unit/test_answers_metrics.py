"""Issue 26's metric families (daemon/metrics/answers.py) on hand-built histories with known figures: the
preemption ledger's totals per ClusterQueue and rule, when the longest-unconsidered pending workload entered its
queue, and how many pending workloads fit the queue's unused nominal quota.

Real: the fold, the metrics' projections (ledger included), the engine (`decide`) for pending reasons, the renderer,
prometheus-client's parser. Faked: nothing; no SQLite file is opened.
"""

from __future__ import annotations

from daemon.domain import events as ev
from daemon.domain.model import Admission, PodSetAssignment
from daemon.metrics import Renderer
from daemon.metrics.families import ANSWERS_FAMILIES, metric_names
from tests.unit.builders import cohort, cq, flavor, job, lq
from tests.unit.test_admission import cycle
from tests.unit.test_metrics_exposition import MetricsWorld, base, samples, value

HOUR = 3_600_000
GPU = "nvidia.com/gpu"


def _absent(got: dict[tuple[str, frozenset[tuple[str, str]]], float], name: str, **labels: str) -> bool:
    want = set(labels.items())
    return not [v for (n, lab), v in got.items() if n == name and want <= lab]


def test_an_unevaluated_workload_is_unconsidered_since_it_entered_until_a_cycle_gives_it_a_reason() -> None:
    w = base()
    w.add(cq("a").flavor("h100", gpu=8), job("big").gpus(16).at(5_000), job("late").gpus(2).at(9_000))
    got = samples(Renderer().render(w.fm).decode())
    # Neither evaluated yet: the older entered at 5 s.
    assert value(got, "admitd_pending_unconsidered_since_timestamp_seconds", cluster_queue="a") == 5.0
    # Both fit? `big` asks 16 of 8: no; `late` asks 2 of 8 unused: yes.
    assert value(got, "admitd_pending_fitting_workloads", cluster_queue="a") == 1.0
    w.apply(cycle(w))  # `late` admitted, `big` gets a reason (more than the queue could ever hold)
    got = samples(Renderer().render(w.fm).decode())
    assert _absent(got, "admitd_pending_unconsidered_since_timestamp_seconds", cluster_queue="a")
    assert value(got, "admitd_pending_fitting_workloads", cluster_queue="a") == 0.0
    # A new arrival is unconsidered from its own entry; one that would fit the 6 GPUs left counts as fitting.
    w.add(job("next").gpus(6).at(20_000))
    got = samples(Renderer().render(w.fm).decode())
    assert value(got, "admitd_pending_unconsidered_since_timestamp_seconds", cluster_queue="a") == 20.0
    assert value(got, "admitd_pending_fitting_workloads", cluster_queue="a") == 1.0


def test_the_ledgers_totals_per_queue_and_rule() -> None:
    w = MetricsWorld()
    w.add(flavor("h100"), cohort("org"))
    for name in ("a", "b"):
        w.add(cq(name).cohort("org").flavor("h100", **{GPU: 8}), lq(name, "q", name))
    x = job("x").ns("a").queue("q").podset("main", 2, **{GPU: 4}).at(0)
    w.submit(x)
    ps = PodSetAssignment(name="main", count=2, flavors={GPU: "h100"}, usage={GPU: 8000})
    w._feed(ev.WorkloadAdmitted(workload=x.key, at=0, admission=Admission(cluster_queue="a", pod_sets=(ps,))))
    w._feed(ev.JobUnsuspended(job=x.key, at=0, decision=1))
    w._feed(
        ev.WorkloadPreempted(
            workload=x.key,
            at=HOUR,
            cluster_queue="a",
            preemptor="b/y",
            preemptor_cluster_queue="b",
            reason="InCohortReclamation",
            policy="reclaimWithinCohort=Any",
        )
    )
    got = samples(Renderer().render(w.fm).decode())
    labels = {"cluster_queue": "a", "rule": "InCohortReclamation"}
    assert value(got, "admitd_preemption_victims_total", **labels) == 1.0
    assert value(got, "admitd_preemption_lost_pod_hours_total", **labels) == 2.0  # two pods for an hour
    assert value(got, "admitd_preemption_lost_gpu_hours_total", **labels) == 8.0  # eight GPUs for an hour
    assert _absent(got, "admitd_preemption_victims_total", cluster_queue="b")


def test_the_families_are_in_the_catalogue() -> None:
    assert {f.name for f in ANSWERS_FAMILIES} <= metric_names()
