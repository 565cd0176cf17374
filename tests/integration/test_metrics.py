"""The metrics: Kueue's names, types and labels, equal to the folded state at every seq, the same after a restart,
accepted by prometheus-client's own text parser, served over HTTP by `admitd simulate --metrics-port`; and the
Grafana dashboard and alert rules in config/ name only metrics that exist.

Real: logs written by `admitd simulate` (SQLite), the fold, the renderer, `prometheus_client.parser`, an HTTP
server and client on localhost, the CLI as a subprocess. Faked: the cluster (the simulator's virtual clock).
"""

from __future__ import annotations

import json
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from daemon.domain.model import Admission
from daemon.domain.reasons import quota_reserved_reason
from daemon.eventlog import LogReader, codec
from daemon.metrics import FoldedMetrics, LogMetrics, Renderer, metric_names
from daemon.query.moment import state_at
from tests.integration.logtools import interruptible

ROOT = Path(__file__).resolve().parents[2]
SCENARIOS = Path(__file__).resolve().parent / "query_scenarios"

# kueue-notes.md section 3 (besides replica_role): the labels each Kueue metric must carry.
KUEUE_LABELS = {
    "kueue_pending_workloads": {"cluster_queue", "status"},
    "kueue_unadmitted_workloads": {"cluster_queue", "reason", "underlying_cause"},
    "kueue_admitted_active_workloads": {"cluster_queue"},
    "kueue_reserving_active_workloads": {"cluster_queue"},
    "kueue_cluster_queue_status": {"cluster_queue", "status"},
    "kueue_cluster_queue_resource_usage": {"cohort", "cluster_queue", "flavor", "resource"},
    "kueue_cluster_queue_resource_reservation": {"cohort", "cluster_queue", "flavor", "resource"},
    "kueue_cluster_queue_nominal_quota": {"cohort", "cluster_queue", "flavor", "resource"},
    "kueue_cluster_queue_borrowing_limit": {"cohort", "cluster_queue", "flavor", "resource"},
    "kueue_cluster_queue_lending_limit": {"cohort", "cluster_queue", "flavor", "resource"},
    "kueue_admitted_workloads": {"cluster_queue", "priority_class"},
    "kueue_quota_reserved_workloads": {"cluster_queue", "priority_class"},
    "kueue_finished_workloads": {"cluster_queue", "priority_class"},
    "kueue_evicted_workloads": {"cluster_queue", "reason", "underlying_cause", "priority_class"},
    "kueue_preempted_workloads": {"preempting_cluster_queue", "reason"},
    "kueue_admission_wait_time_seconds": {"cluster_queue", "priority_class"},
    "kueue_quota_reserved_wait_time_seconds": {"cluster_queue", "priority_class"},
    "kueue_execution_time_seconds": {"cluster_queue", "priority_class"},
}
ISSUE_LIST = {
    "kueue_pending_workloads", "kueue_admitted_workloads_total", "kueue_admission_wait_time_seconds",
    "kueue_admitted_active_workloads", "kueue_quota_reserved_workloads_total", "kueue_evicted_workloads_total",
    "kueue_preempted_workloads_total", "kueue_cluster_queue_resource_usage", "kueue_cluster_queue_nominal_quota",
    "kueue_cluster_queue_borrowing_limit", "kueue_cluster_queue_lending_limit", "kueue_cluster_queue_status",
    "kueue_admission_attempts_total", "kueue_admission_attempt_duration_seconds", "kueue_unadmitted_workloads",
}  # fmt: skip


@pytest.fixture(scope="module")
def dbs(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    out = []
    base = tmp_path_factory.mktemp("metrics-logs")
    for path in [*sorted(SCENARIOS.glob("*.yaml")), ROOT / "config" / "samples" / "cohort-borrow-reclaim.yaml"]:
        db = base / f"{path.stem}.db"
        done = subprocess.run(
            [sys.executable, "-m", "daemon.cli", "simulate", str(path), "--db", str(db), "--json"],
            capture_output=True, text=True, cwd=ROOT, timeout=120, check=False,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        out.append(db)
    return out


Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def samples(text: str) -> Samples:
    out: Samples = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def value(got: Samples, name: str, **labels: str) -> float:
    return got.get((name, tuple(sorted({"replica_role": "leader", **labels}.items()))), 0.0)


def check_against_state(got: Samples, reader: LogReader, seq: int) -> None:
    """Every gauge equals what the fold says at `seq`; the counters equal counts of the log's events up to it."""
    state = state_at(reader, seq)
    view = state.view()
    for name, cq in view.cluster_queues.items():
        admitted = view.admitted_by_cq.get(name, {})
        pending = view.pending_by_cq.get(name, ())
        assert value(got, "kueue_admitted_active_workloads", cluster_queue=name) == len(admitted)
        assert value(got, "kueue_pending_workloads", cluster_queue=name, status="active") + value(
            got, "kueue_pending_workloads", cluster_queue=name, status="inadmissible"
        ) == len(pending)
        causes: dict[str, int] = {}  # Kueue's QuotaReserved reason of each pending workload (`domain.reasons`)
        for p in pending:
            cause = quota_reserved_reason(p.last_reason.kind if p.last_reason is not None else None)
            causes[cause] = causes.get(cause, 0) + 1
        for cause, n in causes.items():
            assert (
                value(
                    got,
                    "kueue_unadmitted_workloads",
                    cluster_queue=name,
                    reason="NoReservation",
                    underlying_cause=cause,
                )
                == n
            ), (name, cause)
        usage: dict[tuple[str, str], int] = {}
        for aw in admitted.values():
            for fr, v in aw.admission.usage().items():
                usage[fr] = usage.get(fr, 0) + v
        for g in cq.resource_groups:
            for fq in g.flavors:
                for rq in fq.resources:
                    lab = {"cohort": cq.cohort or "", "cluster_queue": name, "flavor": fq.name, "resource": rq.name}
                    assert (
                        value(got, "kueue_cluster_queue_resource_usage", **lab)
                        == usage.get((fq.name, rq.name), 0) / 1000
                    )
                    assert value(got, "kueue_cluster_queue_nominal_quota", **lab) == rq.nominal / 1000
                    expect_bl = float("inf") if rq.borrowing_limit is None else rq.borrowing_limit / 1000
                    assert value(got, "kueue_cluster_queue_borrowing_limit", **lab) == expect_bl
        assert value(got, "kueue_cluster_queue_status", cluster_queue=name, status="active") == 1.0
    admissions: dict[str, int] = {}
    evictions: dict[str, int] = {}
    for ev in reader.iter_events():
        if ev.seq > seq:
            break
        if ev.type == "workload.admitted":
            adm = codec.decode(ev.type, ev.version, ev.payload, seq=ev.seq)
            assert isinstance(getattr(adm, "admission", None), Admission)
            cq_name = adm.admission.cluster_queue  # type: ignore[union-attr]
            admissions[cq_name] = admissions.get(cq_name, 0) + 1
        if ev.type == "workload.evicted":
            evictions[ev.subject] = evictions.get(ev.subject, 0) + 1
    for name, n in admissions.items():
        total = sum(v for (m, lab), v in got.items() if m == "kueue_admitted_workloads_total" and
                    ("cluster_queue", name) in lab)  # fmt: skip
        assert total == n
    assert sum(v for (m, _), v in got.items() if m == "kueue_evicted_workloads_total") == sum(evictions.values())
    assert got[("admitd_log_last_seq", ())] == seq


def test_metrics_equal_the_folded_state_at_every_seq_with_the_cache_in_use(dbs: list[Path]) -> None:
    for db in dbs:
        with LogReader(db) as reader:
            events = [(e.seq, codec.decode(e.type, e.version, e.payload, seq=e.seq)) for e in reader.iter_events()]
            live, cached = FoldedMetrics(), Renderer()
            for seq, event in events:
                live.apply(event, seq)
                text = cached.render(live).decode()
                # A fresh fold and renderer up to the same seq: the per-queue cache must never serve stale text.
                fresh = FoldedMetrics()
                for s2, e2 in events:
                    if s2 > seq:
                        break
                    fresh.apply(e2, s2)
                assert text == Renderer().render(fresh).decode(), (db.name, seq)
                check_against_state(samples(text), reader, seq)


def test_a_restarted_process_reports_the_same_values(dbs: list[Path]) -> None:
    admitted_somewhere = False
    for db in dbs:
        first, second = LogMetrics(db), LogMetrics(db)  # the second one replays the log from scratch, as a restart
        try:
            # Wall-clock figures, and the process's own (CPU, memory), move between two scrapes.
            wall = {"admitd_snapshot_age_seconds", "admitd_replay_duration_seconds"}
            a = {
                k: v for k, v in samples(first.render().decode()).items() if k[0] not in wall and "process_" not in k[0]
            }
            b = {
                k: v
                for k, v in samples(second.render().decode()).items()
                if k[0] not in wall and "process_" not in k[0]
            }
        finally:
            first.close()
            second.close()
        assert a == b
        admitted_somewhere |= any(k[0] == "kueue_admitted_workloads_total" for k in a)
    assert admitted_somewhere


def test_the_real_parser_accepts_the_output_with_kueue_types_and_labels(dbs: list[Path]) -> None:
    # The cohort sample (borrowing, reclaim, priority preemption) at +25m: b-urgent done, a-borrower waiting.
    with LogReader(dbs[-1]) as reader:
        upto = reader.seq_at(25 * 60_000)
        fm = FoldedMetrics()
        for e in reader.iter_events():
            if e.seq > upto:
                break
            fm.apply(codec.decode(e.type, e.version, e.payload, seq=e.seq), e.seq)
    families = {f.name: f for f in text_string_to_metric_families(Renderer().render(fm).decode())}
    for name, labels in KUEUE_LABELS.items():
        fam = families[name]
        assert fam.samples, name
        for s in fam.samples:
            names = set(s.labels) - {"replica_role", "le"}
            assert names == labels, (name, s.labels)
            assert s.labels["replica_role"] == "leader"
    assert families["kueue_admission_wait_time_seconds"].type == "histogram"
    assert families["kueue_admitted_workloads"].type == "counter"
    assert families["kueue_cluster_queue_status"].type == "gauge"
    preempted = {(s.labels["preempting_cluster_queue"], s.labels["reason"]): s.value
                 for s in families["kueue_preempted_workloads"].samples if s.name.endswith("_total")}  # fmt: skip
    assert preempted == {("team-b", "InCohortReclamation"): 1.0, ("team-b", "InClusterQueue"): 1.0}
    exposed = {f.name + ("_total" if f.type == "counter" else "") for f in families.values()}
    assert ISSUE_LIST - exposed <= {"kueue_admission_attempts_total", "kueue_admission_attempt_duration_seconds"}
    assert metric_names() >= ISSUE_LIST


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_simulate_serves_metrics_over_http_until_interrupted(tmp_path: Path) -> None:
    port = _free_port()
    proc = subprocess.Popen(
        interruptible("-m", "daemon.cli", "simulate", str(SCENARIOS / "preempted-and-readmitted.yaml"),
                      "--metrics-port", str(port), "--metrics-linger", "--db", str(tmp_path / "sim.db")),
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        body = ""
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
                    assert r.headers["Content-Type"].startswith("text/plain; version=0.0.4")
                    body = r.read().decode()
                if 'kueue_finished_workloads_total{replica_role="leader",cluster_queue="solo"' in body:
                    break
            except OSError:
                pass
            time.sleep(0.2)
        got = samples(body)
        assert value(got, "kueue_admitted_workloads_total", cluster_queue="solo", priority_class="") == 3.0
        assert value(got, "kueue_admitted_workloads_total", cluster_queue="solo", priority_class="high") == 1.0
        assert value(got, "kueue_evicted_workloads_total", cluster_queue="solo", reason="Preempted",
                     underlying_cause="InClusterQueue", priority_class="") == 1.0  # fmt: skip
        assert proc.poll() is None  # still serving after the run, as --metrics-linger says
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            _, err = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()  # fail here, without leaving a server running into the tests that follow
            proc.communicate()
            raise
    assert proc.returncode == 0, err
    assert "still serving /metrics until Ctrl-C" in err


_NAME = re.compile(r"\b((?:kueue|admitd)_[a-z0-9_]+)\b")


def _names_in(expr: str) -> set[str]:
    return set(_NAME.findall(expr))


def _known(token: str, names: set[str]) -> bool:
    return token in names or re.sub(r"_(bucket|sum|count)$", "", token) in names


def test_the_dashboard_and_alert_rules_name_only_metrics_that_exist() -> None:
    names = metric_names()
    dash = json.loads((ROOT / "config" / "grafana" / "admitd-dashboard.json").read_text())
    exprs = [t["expr"] for p in dash["panels"] for t in p["targets"]]
    exprs += [v["query"]["query"] for v in dash["templating"]["list"] if isinstance(v.get("query"), dict)]
    rules = yaml.safe_load((ROOT / "config" / "prometheus" / "admitd-alerts.yaml").read_text())
    exprs += [r["expr"] for g in rules["groups"] for r in g["rules"]]
    used = set().union(*(_names_in(e) for e in exprs))
    assert len(exprs) > 20 and used
    unknown = {t for t in used if not _known(t, names)}
    assert not unknown, unknown
    alerts = {r["alert"] for g in rules["groups"] for r in g["rules"]}
    assert {"AdmitdLogNotAdvancing", "AdmitdActuationFailures", "KueueClusterQueueInactive"} <= alerts
    assert not _known("kueue_no_such_metric", names)  # the check can fail
