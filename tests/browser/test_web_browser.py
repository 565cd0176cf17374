"""The web view in a real headless Chromium (Debian's package, installed by tests/browser/setup), driven by
Playwright: each page shows the known state of a simulated log, the time control changes it, links lead where they
say, a page follows the log without reloading, and a viewer without rights on a namespace does not see its jobs.
A screenshot of each page is kept in .artifacts/browser/ (ignored by git).

Real: Chromium, the page script and uPlot as served, the `admitd ui` aiohttp application (daemon.web.cli) on a
local port, the log written by `admitd simulate` (a subprocess) and appended to by a real EventStore.
Faked: the cluster (the simulator's virtual clock); the viewer's rights (daemon.web.policy.Tokens, a fixed table,
in place of TokenReview and SubjectAccessReview).
"""

from __future__ import annotations

import asyncio
import shutil
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from daemon.web.cli import VIEW, application
from daemon.web.policy import Policy, Tokens

playwright = pytest.importorskip("playwright.sync_api")

ROOT = Path(__file__).resolve().parents[2]
SCENARIO = ROOT / "tests" / "unit" / "data" / "web-scenario.yaml"
ARTIFACTS = ROOT / ".artifacts" / "browser"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@contextmanager
def serving(db: Path, policy: Policy | None = None) -> Iterator[str]:
    """`admitd ui`'s application on a free local port, in a thread with its own event loop; yields its base URL."""
    port = _free_port()
    loop = asyncio.new_event_loop()
    started = threading.Event()
    runner: list[web.AppRunner] = []

    async def start() -> None:
        app = application(db, policy)
        r = web.AppRunner(app, access_log=None)
        await r.setup()
        await web.TCPSite(r, "127.0.0.1", port).start()
        await app[VIEW].series_ready.wait()
        runner.append(r)
        started.set()

    thread = threading.Thread(target=lambda: (loop.run_until_complete(start()), loop.run_forever()), daemon=True)
    thread.start()
    assert started.wait(30), "the web view did not start"
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        asyncio.run_coroutine_threadsafe(runner[0].cleanup(), loop).result(30)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(30)
        loop.close()


def _simulate(path: Path) -> Path:
    subprocess.run(
        [sys.executable, "-m", "daemon.cli", "simulate", str(SCENARIO), "--db", str(path)],
        check=True,
        capture_output=True,
        cwd=ROOT,
        timeout=120,
    )
    return path


@pytest.fixture(scope="module")
def db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _simulate(tmp_path_factory.mktemp("browser") / "web.db")


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    if CHROMIUM is None:
        pytest.fail("no chromium: run tests/browser/setup (scripts/check does)")
    with playwright.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"])
        yield b
        b.close()


@pytest.fixture(scope="module")
def url(db: Path) -> Iterator[str]:
    with serving(db) as base:
        yield base


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    context = browser.new_context(viewport={"width": 1300, "height": 900})
    pg = context.new_page()
    errors: list[str] = []
    pg.on("pageerror", lambda e: errors.append(str(e)))
    yield pg
    context.close()
    assert errors == [], errors


def shot(page: Any, name: str) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=True)


def ready(page: Any, address: str) -> None:
    page.goto(address)
    page.wait_for_selector("body[data-ready='1']", state="attached", timeout=15_000)


def text(page: Any, selector: str) -> str:
    got: str = page.locator(selector).inner_text()
    return got.strip()


def test_the_overview_shows_the_counts_and_what_needs_attention(page: Any, url: str) -> None:
    ready(page, url + "/ui/")
    assert [text(page, f"#n-{k}") for k in ("queues", "pending", "admitted", "inactive")] == ["3", "2", "0", "1"]
    attention = text(page, "ul.attention")
    assert "team-c is stopped: stopPolicy Hold" in attention and "ExceedsMaxQuota" in attention
    shot(page, "overview")


def test_the_time_control_shows_a_past_moment(page: Any, url: str) -> None:
    ready(page, url + "/ui/")
    page.fill("#time-at", "+6m")
    page.click("#time-form button[type=submit]")
    page.wait_for_url("**/ui/?at=%2B6m")
    page.wait_for_selector("body[data-ready='1']", state="attached")
    assert text(page, "#n-admitted") == "2" and text(page, "#moment") == "as of +6m (seq 24)"
    assert "WaitingForQuota" in text(page, "ul.attention")
    # The slider: moved to +50m (3,000,000 ms), the page shows that moment.
    page.eval_on_selector(
        "#time-slider", "el => { el.value = '3000000'; el.dispatchEvent(new Event('change', {bubbles: true})); }"
    )
    page.wait_for_url("**/ui/?at=%2B50m0s")
    assert text(page, "#moment").startswith("as of +50m")
    assert text(page, "#n-admitted") == "2" and text(page, "#n-pending") == "2"
    page.click("#time-now")
    page.wait_for_selector("body[data-ready='1']", state="attached")
    assert text(page, "#n-admitted") == "0"


def test_the_cluster_queue_page_plots_its_figures_and_lists_its_pending(page: Any, url: str) -> None:
    ready(page, url + "/ui/clusterqueue/team-a?at=%2B6m")
    assert page.locator("tr.pending-row").count() == 1
    assert text(page, "tr.pending-row td:nth-child(3)") == "team-a/a-borrower"
    assert "WaitingForQuota" in text(page, "tr.pending-row")
    page.wait_for_function("window.admitdPlots && window.admitdPlots['plot-depth']")
    depth = page.evaluate("(() => { const d = window.admitdPlots['plot-depth'].data; return [d[0], d[1], d[2]]; })()")
    points = {t: [p, a] for t, p, a in zip(depth[0], depth[1], depth[2], strict=True)}
    assert points[0] == [0, 1] and points[10] == [0, 2] and points[300] == [1, 1] and points[1200] == [2, 1]
    assert page.locator("#plot-depth canvas").count() >= 1
    assert page.locator("#plot-usage canvas").count() >= 1
    assert "InCohortReclamation" in text(page, "section[data-frag=preemptions]")
    shot(page, "clusterqueue")


def test_links_lead_from_the_overview_to_a_job_and_its_events(page: Any, url: str) -> None:
    ready(page, url + "/ui/?at=%2B6m")
    page.click(".cq[data-cq='team-a'] h3 a")
    page.wait_for_url("**/ui/clusterqueue/team-a?at=%2B6m")
    page.click("tr.pending-row a[href*='/job/']")
    page.wait_for_url("**/ui/job/team-a/a-borrower?at=%2B6m")
    assert text(page, "#job-reason") == "WaitingForQuota"
    assert "position 0 of 1 pending" in text(page, "#job-status")
    shot(page, "job")
    page.click("ul.statements li:has-text('preempted at +5m') a.seq")
    page.wait_for_url("**/ui/event/18")
    assert text(page, "#event-type") == "workload.preempted"
    shot(page, "event")
    page.click("a[href='/ui/job/team-a/a-borrower']")
    page.wait_for_url("**/ui/job/team-a/a-borrower")
    assert "finished" in text(page, "section[data-frag=timeline]")


def test_a_page_follows_the_log_without_reloading(page: Any, browser: Any, tmp_path: Path, db: Path) -> None:
    copy = tmp_path / "live.db"
    shutil.copy(db, copy)
    with serving(copy) as base:
        ready(page, base + "/ui/")
        page.evaluate("document.body.dataset.pollMs = '200'; window.notReloaded = true;")
        assert text(page, "#n-queues") == "3"
        subprocess.run([sys.executable, "-c", _ADD_QUEUE, str(copy)], check=True, cwd=ROOT, timeout=60)
        page.wait_for_function("document.getElementById('n-queues').textContent === '4'", timeout=15_000)
        assert page.evaluate("window.notReloaded") is True  # the fragments changed, not the page
        assert page.locator(".cq[data-cq='team-d']").count() == 1


_ADD_QUEUE = """
import asyncio, sys
from daemon.domain import events as ev
from daemon.domain.model import ClusterQueue
from daemon.eventlog import EventStore

async def main() -> None:
    async with await EventStore.open(sys.argv[1], clock=lambda: 6_700_000) as store:
        await store.append([ev.ClusterQueueObserved(cluster_queue=ClusterQueue(name="team-d"))])

asyncio.run(main())
"""


def test_a_viewer_without_rights_on_a_namespace_does_not_see_its_jobs(browser: Any, db: Path) -> None:
    policy = Tokens({"alice": (True, frozenset({"team-a"}))})
    with serving(db, policy) as base:
        context = browser.new_context(
            viewport={"width": 1300, "height": 900}, extra_http_headers={"Authorization": "Bearer alice"}
        )
        try:
            page = context.new_page()
            ready(page, base + "/ui/clusterqueue/team-c")
            assert page.locator("tr.pending-row").count() == 0
            assert "a job in a namespace you may not see" in text(page, "section[data-frag=pending]")
            assert "c-held" not in page.content()
            shot(page, "clusterqueue-hidden")
            res = page.goto(base + "/ui/job/team-c/c-held")
            assert res is not None and res.status == 403
            assert "namespace team-c" in text(page, "#error-message")
            ready(page, base + "/ui/clusterqueue/team-a")
            assert text(page, "tr.pending-row td:nth-child(3)") == "team-a/a-huge"
        finally:
            context.close()
        anonymous = browser.new_context()
        try:
            res = anonymous.new_page().goto(base + "/ui/")
            assert res is not None and res.status == 401
        finally:
            anonymous.close()
