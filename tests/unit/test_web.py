"""The web view's pages on a simulated log whose state is known (tests/unit/data/web-scenario.yaml): what each page
says, at the end and at a past moment, who sees which jobs, and the plots' series.

Real: `admitd simulate` (a subprocess) writes the log; the pages are served by the real aiohttp application of
`admitd ui` (daemon.web.cli.application) through aiohttp's test client, reading the file with the real answers.
Faked: the cluster (the simulator's virtual clock); the viewer's rights (a fixed token table, daemon.web.policy.Tokens,
in place of TokenReview and SubjectAccessReview).
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from aiohttp.test_utils import TestClient, TestServer

from daemon.eventlog import LogReader
from daemon.web import render
from daemon.web.cli import VIEW, application
from daemon.web.policy import Policy, Tokens
from daemon.web.series import Series

ROOT = Path(__file__).resolve().parents[2]
SCENARIO = Path(__file__).resolve().parent / "data" / "web-scenario.yaml"


@pytest.fixture(scope="module")
def db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("web") / "web.db"
    subprocess.run(
        [sys.executable, "-m", "daemon.cli", "simulate", str(SCENARIO), "--db", str(path)],
        check=True,
        capture_output=True,
        cwd=ROOT,
        timeout=120,
    )
    return path


async def _client(db: Path, policy: Policy | None = None) -> TestClient[object, object]:
    app = application(db, policy)
    client: TestClient[object, object] = TestClient(TestServer(app))
    await client.start_server()
    await app[VIEW].series_ready.wait()
    return client


@pytest.fixture
async def client(db: Path) -> AsyncIterator[TestClient[object, object]]:
    c = await _client(db)
    yield c
    await c.close()


async def page(client: TestClient[object, object], path: str, status: int = 200, **headers: str) -> str:
    res = await client.get(path, headers=headers)
    text = await res.text()
    assert res.status == status, text
    return text


def grab(html: str, element_id: str) -> str:
    m = re.search(rf'id="{element_id}"[^>]*>([^<]*)<', html)
    assert m is not None, f"no #{element_id}"
    return m.group(1)


async def test_the_overview_at_the_end_names_the_stopped_queue_and_the_job_that_never_fits(
    client: TestClient[object, object],
) -> None:
    html = await page(client, "/ui/")
    assert (grab(html, "n-queues"), grab(html, "n-pending"), grab(html, "n-admitted"), grab(html, "n-inactive")) == (
        "3",
        "2",
        "0",
        "1",
    )
    attention = html.split('data-frag="attention"')[1].split("</section>")[0]
    assert "team-c" in attention and "stopped: stopPolicy Hold" in attention
    assert "ExceedsMaxQuota" in attention and "team-b" not in attention
    assert "cohort <b>all-teams</b>" in html
    assert 'href="/ui/clusterqueue/team-a"' in html
    assert 'data-live="1"' in html  # the present follows the log


async def test_the_overview_at_a_past_moment_shows_that_moment(client: TestClient[object, object]) -> None:
    html = await page(client, "/ui/?at=%2B6m")
    assert (grab(html, "n-pending"), grab(html, "n-admitted")) == ("2", "2")
    assert "WaitingForQuota" in html and "ExceedsMaxQuota" not in html
    assert grab(html, "moment") == "as of +6m (seq 24)"
    assert 'data-live="0"' in html  # a past moment does not change
    assert 'href="/ui/clusterqueue/team-a?at=%2B6m"' in html  # links keep the moment
    assert 'value="360000"' in html  # the slider sits at the moment


async def test_a_bad_moment_is_a_clear_error(client: TestClient[object, object]) -> None:
    html = await page(client, "/ui/?at=yesterday", 400)
    assert "at: " in html and "virtual times" in html


async def test_the_cluster_queue_page_lists_its_pending_workloads_in_order_with_reasons(
    client: TestClient[object, object],
) -> None:
    html = await page(client, "/ui/clusterqueue/team-a?at=%2B6m")
    rows = re.findall(r'<tr class="pending-row" data-job="([^"]+)">', html)
    assert rows == ["team-a/a-borrower"]
    assert 'href="/ui/event/24"><span class="reason" title="Kueue: WaitingForQuota">WaitingForQuota</span></a>' in html
    assert "8 more needed" in html
    pre = html.split('data-frag="preemptions"')[1]
    assert "InCohortReclamation" in pre and 'href="/ui/event/18"' in pre
    adm = html.split('data-frag="admissions"')[1].split("</section>")[0]
    assert adm.count("<tr><td>") == 2  # a-nominal at +0s, a-borrower at +10s (its readmission is after +6m)


async def test_an_unknown_cluster_queue_says_so(client: TestClient[object, object]) -> None:
    html = await page(client, "/ui/clusterqueue/nope")
    assert "no ClusterQueue nope at this moment" in html


async def test_the_job_page_links_every_statement_to_its_event(client: TestClient[object, object]) -> None:
    html = await page(client, "/ui/job/team-a/a-borrower?at=%2B6m")
    assert grab(html, "job-reason") == "WaitingForQuota"
    statements = html.split('class="statements">')[1].split("</ul>")[0]
    items = re.findall(r'<li><a class="seq" href="/ui/event/(\d+)">seq (\d+)</a> ([^<]+)</li>', statements)
    assert len(items) >= 5 and all(a == b for a, b, _ in items)
    assert any(t.startswith("preempted at +5m by team-b/b-routine") and s == "18" for s, _, t in items)
    timeline = html.split('data-frag="timeline"')[1]
    assert 'by <a href="/ui/job/team-b/b-routine?at=%2B6m">team-b/b-routine</a>' in timeline
    assert "readmitted" not in timeline  # that is at +50m, after the moment
    end = await page(client, "/ui/job/team-a/a-borrower")
    assert "readmitted" in end and "finished" in end


async def test_an_unknown_job_is_404_with_the_reason(client: TestClient[object, object]) -> None:
    html = await page(client, "/ui/job/team-a/nope", 404)
    assert 'id="job-error"' in html


async def test_the_event_page_shows_one_event_and_links_its_subject(client: TestClient[object, object]) -> None:
    html = await page(client, "/ui/event/18")
    assert grab(html, "event-type") == "workload.preempted"
    assert 'href="/ui/job/team-a/a-borrower"' in html
    assert "InCohortReclamation" in html and "team-b/b-routine" in html
    assert 'id="as-of" href="/ui/?at=%2B5m"' in html
    assert "no event with seq 999" in await page(client, "/ui/event/999", 404)


async def test_the_head_and_the_assets_are_served(client: TestClient[object, object]) -> None:
    res = await client.get("/ui/api/head")
    assert (await res.json()) == {"seq": 42}
    for name in ("uPlot.iife.min.js", "uPlot.min.css", "uPlot.LICENSE", "web.js", "web.css"):
        res = await client.get(f"/ui/static/{name}")
        assert res.status == 200 and len(await res.read()) > 100, name


async def test_a_viewer_sees_only_the_namespaces_it_may(db: Path) -> None:
    c = await _client(db, Tokens({"alice": (True, frozenset({"team-a"})), "nobody": (False, frozenset())}))
    try:
        await page(c, "/ui/", 401)
        alice = {"Authorization": "Bearer alice"}
        assert "ExceedsMaxQuota" in await page(c, "/ui/", **alice)  # queue-level figures: counts by reason
        html = await page(c, "/ui/clusterqueue/team-c", **alice)
        assert "team-c/c-held" not in html and "a job in a namespace you may not see" in html
        assert "team-a/a-huge" in await page(c, "/ui/clusterqueue/team-a", **alice)
        b = await page(c, "/ui/clusterqueue/team-b", **alice)
        assert "team-b/b-routine" not in b and "team-b/b-urgent" not in b
        assert "team-c" in await page(c, "/ui/job/team-c/c-held", 403, **alice)
        await page(c, "/ui/event/26", 403, **alice)  # about team-b/b-routine
        event = await page(c, "/ui/event/18", **alice)  # team-a/a-borrower preempted by team-b/b-routine
        assert "team-a/a-borrower" in event and "b-routine" not in event and "a namespace you may not see" in event
        await page(c, "/ui/job/team-a/a-huge", **alice)
        await page(c, "/ui/", 403, Authorization="Bearer nobody")
    finally:
        await c.close()


def test_the_series_has_each_queues_figures_over_time(db: Path) -> None:
    series = Series()
    with LogReader(db) as reader:
        series.follow(reader)
    body = series.plot("team-a", 360_000)
    points = dict(zip(body["t"], zip(body["pending"], body["admitted"], strict=True), strict=True))  # type: ignore[call-overload]
    assert points[0.0] == (0, 1)
    assert points[10.0] == (0, 2)
    assert points[300.0] == (1, 1)  # the reclaimed borrower pending again at the instant of its preemption
    assert points[1200.0] == (2, 1)
    assert points[3000.0] == (1, 2)
    assert points[6600.0] == (1, 0)  # a-huge never fits
    assert body["nominal"] == {"h100/nvidia.com/gpu": 8.0}
    assert body["usage"]["h100/nvidia.com/gpu"][body["t"].index(10.0)] == 16.0  # type: ignore[index,union-attr]


def test_the_series_followed_bit_by_bit_equals_one_fold_and_stays_bounded(db: Path) -> None:
    whole, bits, small = Series(), Series(), Series(limit=4)
    with LogReader(db) as reader:
        whole.follow(reader)
        while bits.follow(reader, limit=5):
            pass
        small.follow(reader)
    assert whole.plot("team-a", 0) == bits.plot("team-a", 0)
    assert all(len(p) <= 4 for p in small.points.values())
    assert small.width > 1  # the buckets widened to keep it so
    assert small.plot("team-a", 0)["t"][-1] == 6600.0  # type: ignore[index]


def test_what_comes_from_the_log_is_escaped() -> None:
    links = render.Links("/ui")
    html = render.event(
        {
            "seq": 1,
            "time": "+0s",
            "type": "<b>x</b>",
            "version": 1,
            "subject": "job/ns/<i>",
            "cause": None,
            "hash": "00",
            "payload": {"name": "<script>alert(1)</script>"},
        },
        1,
        links,
    )
    assert "<script>" not in html and "&lt;script&gt;" in html and "<b>x</b>" not in html


async def test_the_overviews_reasons_from_the_series_equal_those_counted_from_the_rows(db: Path) -> None:
    """At the present the overview counts reasons from the series' fold (its pending index), never reading rows;
    they must be what the pending answer's rows say."""
    app = application(db)
    c: TestClient[object, object] = TestClient(TestServer(app))
    await c.start_server()
    try:
        view = app[VIEW]
        await view.series_ready.wait()
        live = view._live_reasons(42)
        assert live is not None
        rows = render.by_reason(await view._ask("pending", None))
        assert {k: v for k, v in live.items() if v} == {k: v for k, v in rows.items() if v}
        assert live["team-a"] == {"ExceedsMaxQuota": 1} and live["team-c"] == {"QueueStopped": 1}
    finally:
        await c.close()


async def test_answers_from_the_series_fold_equal_the_files(db: Path) -> None:
    """`admitd ui` answers the present from its series' fold (as the daemon from its own); they must be the file's."""
    from daemon.answers.answer import answer_from_file, parse  # noqa: PLC0415

    app = application(db)
    c: TestClient[object, object] = TestClient(TestServer(app))
    await c.start_server()
    try:
        view = app[VIEW]
        await view.series_ready.wait()
        for command, job, params in [
            ("queues", None, {}),
            ("pending", None, {}),
            ("pending", None, {"queue": ["team-a"]}),
            ("explain", "team-a/a-huge", {}),
            ("explain", "team-c/c-held", {}),
        ]:
            q = parse(command, params, job)
            mine = view._from_series(q)
            assert mine is not None, command
            assert mine.body == answer_from_file(db, q, 0, live=False).body, (command, job, params)
    finally:
        await c.close()


async def test_answers_at_past_moments_from_the_timeline_equal_the_files(db: Path) -> None:
    """A page at a past moment asks the series' timeline (`WebView._past`); at every seq of the log each answer
    must be the file's (`pending`: its rows, of one queue the first `render.MAX_ROWS`)."""
    import dataclasses  # noqa: PLC0415
    import json  # noqa: PLC0415

    from daemon.answers.answer import BadRequest, answer_from_file, parse  # noqa: PLC0415
    from daemon.query.moment import clock_of, resolve  # noqa: PLC0415

    app = application(db)
    c: TestClient[object, object] = TestClient(TestServer(app))
    await c.start_server()
    try:
        view = app[VIEW]
        await view.series_ready.wait()
        assert view.series.timeline.start is not None
        reader = view.reader()
        clock = clock_of(reader)
        outcomes: set[str] = set()
        for seq in range(clock.first_seq, clock.last_seq + 1):
            m = resolve(reader, clock, at=None, seq=seq, now_ms=0)
            for command, job, params in [
                ("queues", None, {}),
                ("pending", None, {}),
                ("pending", None, {"queue": ["team-a"]}),
                ("explain", "team-a/a-huge", {}),
                ("explain", "team-c/c-held", {}),
            ]:
                q = dataclasses.replace(parse(command, params, job), seq=seq)
                timeline = view._timeline_for(seq)
                assert timeline is not None
                try:
                    mine = view._past(q, m, timeline)
                except BadRequest as err:
                    mine = {"error": [err.status, err.message]}
                try:
                    theirs = json.loads(answer_from_file(db, q, 0, live=False).body)
                except BadRequest as err:
                    theirs = {"error": [err.status, err.message]}
                if command == "pending" and "error" not in theirs:
                    rows = theirs["cluster_queues"]
                    theirs = {"cluster_queues": {k: v[: render.MAX_ROWS] for k, v in rows.items()}}
                    if "queue" in params:  # with the queues' answer from the same state (the page asks both)
                        theirs["queues"] = json.loads(
                            answer_from_file(db, dataclasses.replace(parse("queues", {}), seq=seq), 0, live=False).body
                        )
                assert mine == theirs, (seq, command, job, params)
                outcomes.add(mine.get("status", "error" if "error" in mine else command))
        assert {"queues", "pending", "error"} <= outcomes, outcomes  # explain before the job was seen: its 404
        assert outcomes & {"pending", "admitted", "finished"}, outcomes  # and after
    finally:
        await c.close()


async def test_a_queues_first_rows_from_the_series_are_the_answers_first_rows(db: Path) -> None:
    app = application(db)
    c: TestClient[object, object] = TestClient(TestServer(app))
    await c.start_server()
    try:
        view = app[VIEW]
        await view.series_ready.wait()
        for cq in ("team-a", "team-c", "team-b"):
            mine = view._first_pending(cq)
            whole = (await view._ask("pending", None, queue=cq))["cluster_queues"].get(cq, [])
            assert mine == whole[: render.MAX_ROWS], cq
        from daemon.query.listing import pending_entries  # noqa: PLC0415
        from daemon.query.moment import clock_of  # noqa: PLC0415

        clock = clock_of(view.reader())
        assert pending_entries(view.series.state, clock, "team-a", limit=0) == {"team-a": []}
        assert [r["job"] for r in pending_entries(view.series.state, clock, "team-a", limit=1)["team-a"]] == [
            "team-a/a-huge"
        ]
    finally:
        await c.close()


def test_admitd_ui_on_a_taken_port_says_so_in_one_line(db: Path) -> None:
    import socket  # noqa: PLC0415

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = subprocess.run(
            [sys.executable, "-m", "daemon.cli", "ui", "--db", str(db), "--port", str(port)],
            capture_output=True,
            text=True,
            cwd=ROOT,
            timeout=60,
            check=False,
        )
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith(f"admitd ui: cannot listen on 127.0.0.1:{port}: ") and done.stderr.count("\n") == 1


def test_admitd_ui_on_a_missing_file_says_so(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "daemon.cli", "ui", "--db", str(tmp_path / "none.db")],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2 and "no such file" in done.stderr and not (tmp_path / "none.db").exists()


def test_the_past_memory_budget_reaches_the_timeline(db: Path) -> None:
    """`admitd ui --past-memory MIB` bounds the series' timeline; a daemon's view has its own, smaller default."""
    from daemon.web.server import DAEMON_PAST_BUDGET_BYTES, WebView  # noqa: PLC0415

    assert application(db, past_memory_mib=3)[VIEW].series.timeline.budget_bytes == 3 * 2**20
    assert application(db)[VIEW].series.timeline.budget_bytes == 1024 * 2**20
    from daemon.answers.answer import Answers  # noqa: PLC0415

    assert WebView(db, Answers(db)).series.timeline.budget_bytes == DAEMON_PAST_BUDGET_BYTES
    bad = subprocess.run(
        [sys.executable, "-m", "daemon.cli", "ui", "--db", str(db), "--past-memory", "0"],
        check=False,
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
    )
    assert bad.returncode == 2
    assert "--past-memory must be at least 1 (MiB), got 0" in bad.stderr
