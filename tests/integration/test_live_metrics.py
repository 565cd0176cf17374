"""The live instruments (what only a running process sees) move when the work they measure happens, and a scrape of
a log its writer has not created yet says "not ready".

Real: the SQLite log writer, prometheus-client's registry, the Reflector's retry loop, the admit-stage wrapper of
`admitd run`, an HTTP server on localhost. Faked: the API server (a client object answering a list and then failing
its watch), the admit stage (a stand-in that appends through listeners as the real one does). The LocalQueue
metrics are checked on a log written by the simulator, against the log's own events.
"""

from __future__ import annotations

import asyncio
import contextlib
import urllib.error
import urllib.request
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from daemon import metrics
from daemon.domain.events import Event, JobFinished, JobObserved, WorkloadAdmitted
from daemon.eventlog import EventStore, LogReader, codec
from daemon.eventlog.errors import AppendFailed
from daemon.kube.errors import Temporary
from daemon.kube.run import CountedCycles
from daemon.kube.watch import Reflector, Resource
from daemon.metrics import (
    LIVE,
    LOCAL_QUEUE_FAMILIES,
    FoldedMetrics,
    LogMetrics,
    MetricsNotReady,
    Renderer,
    serve,
)
from daemon.sim.run import run_simulation
from daemon.sim.scenario import load_scenario
from tests.integration.logtools import ROOT
from tests.samples import admission, one_of_each


def value(name: str, **labels: str) -> float:
    return LIVE.get_sample_value(name, labels) or 0.0


async def test_the_writer_reports_append_and_commit_latency_and_its_failure(tmp_path: Path) -> None:
    appends, commits = value("admitd_append_latency_seconds_count"), value("admitd_commit_latency_seconds_count")
    failures = value("admitd_append_failures_total")
    events = one_of_each()
    async with await EventStore.open(tmp_path / "a.db") as store:
        store.observer = metrics.write_observer()
        await store.append(events[:5])
        await asyncio.gather(*(store.append([e]) for e in events[5:15]))  # group commit: fewer batches than appends
        assert value("admitd_append_latency_seconds_count") == appends + 11
        batches = value("admitd_commit_latency_seconds_count") - commits
        assert 2 <= batches <= 11
        assert value("admitd_commit_latency_seconds_sum") > 0
        assert value("admitd_append_failures_total") == failures
        with pytest.raises(AppendFailed):
            await store.append(events[:1], cause=2**70)  # a cause beyond SQLite's INTEGER stops the writer
        assert value("admitd_append_failures_total") == failures + 1


async def test_admission_attempts_are_counted_by_result_and_timed() -> None:
    class Listeners:
        def __init__(self) -> None:
            self.listeners: list[Any] = []

    class StandInAdmit:
        name = "admit"
        wake = asyncio.Event()

        def __init__(self, recorder: Listeners) -> None:
            self.recorder = recorder
            self.admit_next = False

        def has_work(self) -> bool:
            return True

        async def step(self) -> None:
            event: Event = (
                WorkloadAdmitted(workload="research/train-a", at=1, admission=admission())
                if self.admit_next
                else JobFinished(job="research/train-a", at=1)
            )
            for listener in self.recorder.listeners:
                listener(event, 1)
            await asyncio.sleep(0.01)

    success = value("kueue_admission_attempts_total", replica_role="leader", result="success")
    inadmissible = value("kueue_admission_attempts_total", replica_role="leader", result="inadmissible")
    timed = value("kueue_admission_attempt_duration_seconds_count", replica_role="leader", result="success")
    recorder = Listeners()
    admit = StandInAdmit(recorder)
    stage = CountedCycles(admit, recorder, metrics.admission_attempt)  # type: ignore[arg-type]
    assert stage.name == "admit" and stage.wake is admit.wake and stage.has_work()
    await stage.step()
    admit.admit_next = True
    await stage.step()
    await stage.step()
    assert value("kueue_admission_attempts_total", replica_role="leader", result="success") == success + 2
    assert value("kueue_admission_attempts_total", replica_role="leader", result="inadmissible") == inadmissible + 1
    assert value("kueue_admission_attempt_duration_seconds_count", replica_role="leader", result="success") == timed + 2
    assert value("kueue_admission_attempt_duration_seconds_sum", replica_role="leader", result="success") >= 0.02


async def test_a_watch_restart_is_counted_per_resource() -> None:
    class FailingWatch:
        async def request(self, method: str, path: str, **_: Any) -> dict[str, Any]:
            return {"kind": "JobList", "apiVersion": "batch/v1", "items": [], "metadata": {"resourceVersion": "7"}}

        async def stream(self, path: str, params: dict[str, str], **_: Any) -> AsyncIterator[tuple[str, Any]]:
            raise Temporary("WATCH", path, 500, "the server is restarting")
            yield "", {}  # an async generator

    before = value("admitd_watch_restarts_total", resource="jobs")
    reflector = Reflector(
        FailingWatch(),  # type: ignore[arg-type]
        Resource("jobs", "/apis/batch/v1/jobs"),
        on_event=lambda *_: None,
        on_listed=lambda _: None,
        seed=1,
        on_restart=metrics.watch_restarted,
    )
    task = asyncio.create_task(reflector.run())
    try:
        for _ in range(100):
            if reflector.restarts >= 2:
                break
            await asyncio.sleep(0.05)
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    assert reflector.restarts >= 2
    assert value("admitd_watch_restarts_total", resource="jobs") == before + reflector.restarts


def test_the_leader_gauge_follows_the_elector_and_the_replay_duration_is_the_processs_own() -> None:
    leading = [False]
    metrics.leader_is(lambda: leading[0])
    assert value("admitd_leader") == 0
    leading[0] = True
    assert value("admitd_leader") == 1
    metrics.replayed(1.25)
    assert value("admitd_replay_duration_seconds") == 1.25


def test_a_log_being_created_is_not_ready_then_served(tmp_path: Path) -> None:
    db = tmp_path / "new.db"
    db.write_bytes(b"")  # what `create_new_log` leaves before the first migration commits
    scraped = LogMetrics(db)
    with pytest.raises(MetricsNotReady, match="being created by its writer"):
        scraped.render()
    server = serve(("127.0.0.1", 0), scraped.render)
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/metrics"
        with pytest.raises(urllib.error.HTTPError) as info:
            urllib.request.urlopen(url, timeout=5)
        info.value.close()
        assert info.value.code == 503 and "not ready" in (info.value.reason or "")

        async def write() -> None:
            async with await EventStore.open(db) as store:
                await store.append(one_of_each()[:3])

        asyncio.run(write())
        with urllib.request.urlopen(url, timeout=5) as r:
            assert r.status == 200 and b"admitd_log_last_seq 3.0" in r.read()
    finally:
        server.shutdown()
        server.server_close()
        scraped.close()


def test_a_file_that_is_not_a_log_is_still_an_error_not_not_ready(tmp_path: Path) -> None:
    db = tmp_path / "other.db"
    db.write_text("hello, this is a text file and not a database at all" * 3)
    with pytest.raises(Exception, match="not an admitd event log") as info:
        LogMetrics(db).render()
    assert not isinstance(info.value, MetricsNotReady)


def test_local_queue_metrics_when_enabled_equal_the_fold_and_parse(tmp_path: Path) -> None:
    db = tmp_path / "lq.db"
    scenario = ROOT / "tests" / "integration" / "query_scenarios" / "preempted-and-readmitted.yaml"
    asyncio.run(run_simulation(load_scenario(scenario), db_path=db))
    with LogReader(db) as reader:
        fm = FoldedMetrics()
        fm.follow(reader)
        admitted_by_lq: dict[tuple[str, str], int] = {}
        evicted_by_lq: dict[tuple[str, str], int] = {}
        for e in reader.iter_events():
            if e.type in ("workload.admitted", "workload.evicted"):
                ns = e.subject.removeprefix("job/").split("/")[0]
                row = next(r for r in reader.events_of(e.subject, e.seq) if r.type == "job.observed")
                observed = codec.decode(row.type, row.version, row.payload, seq=row.seq)
                assert isinstance(observed, JobObserved)  # the LocalQueue the job was observed with
                lq = (ns, observed.workload.queue_name or "")
                table = admitted_by_lq if e.type == "workload.admitted" else evicted_by_lq
                table[lq] = table.get(lq, 0) + 1
    assert admitted_by_lq and evicted_by_lq
    off = Renderer().render(fm).decode()
    assert "kueue_local_queue_" not in off  # off by default, as Kueue's LocalQueueMetrics gate
    text = Renderer(local_queue_metrics=True).render(fm).decode()
    families = {f.name: f for f in text_string_to_metric_families(text)}
    for name in LOCAL_QUEUE_FAMILIES:
        assert name.removesuffix("_total") in families, name

    def total(family: str) -> dict[tuple[str, str], float]:
        out: dict[tuple[str, str], float] = {}
        for s in families[family].samples:
            if s.name.endswith("_total"):
                key = (s.labels["namespace"], s.labels["name"])
                out[key] = out.get(key, 0) + s.value
        return out

    assert total("kueue_local_queue_admitted_workloads") == admitted_by_lq
    assert total("kueue_local_queue_evicted_workloads") == evicted_by_lq
    waits = [s for s in families["kueue_local_queue_admission_wait_time_seconds"].samples if s.name.endswith("_count")]
    assert sum(s.value for s in waits) == sum(admitted_by_lq.values())
    view = fm.state.view()
    pending = sum(len(v) for v in view.pending_by_cq.values())
    gauges = families["kueue_local_queue_pending_workloads"].samples
    assert sum(s.value for s in gauges) == pending
    active = families["kueue_local_queue_admitted_active_workloads"].samples
    assert sum(s.value for s in active) == sum(len(v) for v in view.admitted_by_cq.values())
