"""The answers API (`daemon.answers`) over HTTP on logs whose answers are known: each body equals the CLI's
`--json` on the same file, from the file (past moments) and from a live fold (the present); bad requests get 4xx
JSON errors naming the parameter.

Real: the simulator's log (tests/integration/query_scenarios), the CLI as a subprocess, aiohttp serving on loopback
and a real HTTP client. Faked: nothing; the daemon's own wiring is tested in test_served_answers_daemon.py.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from daemon.answers import http as answers_http
from daemon.answers.answer import Answers, LiveSeqs
from daemon.eventlog import LogReader, replay
from tests.integration.daemon_harness import free_port

ROOT = Path(__file__).resolve().parents[2]
SCENARIO = Path(__file__).resolve().parent / "query_scenarios" / "strict-fifo-blocked.yaml"


def cli(*args: str) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-m", "daemon.cli", *args, "--json"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    body: dict[str, Any] = json.loads(done.stdout)
    return body


def simulate(scenario: Path, path: Path, *options: str) -> Path:
    """`admitd simulate SCENARIO --db PATH OPTIONS...`, which must succeed; PATH."""
    done = subprocess.run(
        [sys.executable, "-m", "daemon.cli", "simulate", str(scenario), "--db", str(path), *options],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return path


@pytest.fixture(scope="module")
def db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return simulate(SCENARIO, tmp_path_factory.mktemp("answers") / "strict.db", "--json")


class Served:
    def __init__(self, base: str, answers: Answers, session: aiohttp.ClientSession) -> None:
        self.base, self.answers, self.session = base, answers, session

    async def get(self, path: str, **params: str) -> tuple[int, Any]:
        async with self.session.get(self.base + path, params=params) as r:
            raw = await r.read()
            if r.content_type == "application/json":
                return r.status, json.loads(raw)
            return r.status, raw.decode()


async def _serve(answers: Answers) -> AsyncIterator[Served]:
    app = web.Application()
    answers_http.add_routes(app, answers)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    try:
        async with aiohttp.ClientSession() as session:
            yield Served(f"http://127.0.0.1:{port}", answers, session)
    finally:
        answers.close()
        await runner.cleanup()


@pytest.fixture
async def from_file(db: Path) -> AsyncIterator[Served]:
    async for s in _serve(Answers(db)):
        yield s


@pytest.fixture
async def from_fold(db: Path) -> AsyncIterator[Served]:
    with LogReader(db) as reader:
        state = replay(reader)
    async for s in _serve(Answers(db, state=state, live_seqs=LiveSeqs())):
        yield s


async def test_past_moments_are_the_clis_answers_with_their_known_results(from_file: Served, db: Path) -> None:
    status, x = await from_file.get("/answers/v1/explain/lab/small", at="+1m")
    assert status == 200
    assert x == cli("explain", "lab/small", "--at", "+1m", "--db", str(db))
    assert (x["status"], x["pending"]["reason"], x["pending"]["blocked_by"]) == ("pending", "BlockedByHead", "lab/big")
    assert x["position"] == {"cluster_queue": 1, "local_queue": 1, "pending_in_cluster_queue": 2}

    status, p = await from_file.get("/answers/v1/pending", at="+1m", queue="strict")
    assert status == 200 and p == cli("pending", "--queue", "strict", "--at", "+1m", "--db", str(db))
    rows = p["cluster_queues"]["strict"]
    assert [(r["job"], r["position"], r["local_queue_position"]) for r in rows] == [
        ("lab/big", 0, 0),
        ("lab/small", 1, 1),
    ]

    status, qs = await from_file.get("/answers/v1/queues", at="+1m")
    assert status == 200 and qs == cli("queues", "--at", "+1m", "--db", str(db))
    (strict,) = qs["cluster_queues"]
    assert (strict["name"], strict["pending"], strict["admitted"], strict["resources"][0]["used"]) == (
        "strict",
        2,
        1,
        "6",
    )

    status, h = await from_file.get("/answers/v1/history/lab/small")
    assert status == 200 and h == cli("history", "lab/small", "--db", str(db))

    status, r = await from_file.get("/answers/v1/replay", seq="5")
    assert status == 200 and r == cli("replay", "--seq", "5", "--db", str(db))
    assert r["at"]["seq"] == 5

    status, text = await from_file.get("/answers/v1/explain/lab/small", at="+1m", format="text")
    assert status == 200 and "lab/small" in text and "lab/big" in text


async def test_the_present_comes_from_the_live_fold_and_equals_the_file(from_fold: Served, db: Path) -> None:
    for path, args in [
        ("/answers/v1/explain/lab/small", ("explain", "lab/small")),
        ("/answers/v1/queues", ("queues",)),
        ("/answers/v1/pending", ("pending",)),
    ]:
        status, body = await from_fold.get(path)
        assert status == 200, body
        assert body == cli(*args, "--db", str(db)), path
    assert from_fold.answers.live_answers == 3
    status, body = await from_fold.get("/answers/v1/pending", queue="lab/q", at="now")
    assert status == 200 and body["cluster_queues"].get("strict", []) == []  # all ran by the end
    assert from_fold.answers.live_answers == 4


async def test_bad_requests_name_the_parameter(from_file: Served) -> None:
    cases = [
        ("/answers/v1/queues", {"since": "1"}, 400, "since"),
        ("/answers/v1/queues", {"at": "yesterday"}, 400, "at"),
        ("/answers/v1/queues", {"at": "+1m", "format": "xml"}, 400, "format"),
        ("/answers/v1/explain/lab/nobody", {}, 404, "job"),
        ("/answers/v1/explain", {}, 400, "job"),
        ("/answers/v1/pending", {"queue": "nowhere"}, 404, "queue"),
        ("/answers/v1/replay", {}, 400, "at"),
        ("/answers/v1/replay", {"seq": "0"}, 400, "seq"),
        ("/answers/v1/replay", {"seq": "ten"}, 400, "seq"),
        ("/answers/v1/replay", {"seq": "999999"}, 400, "seq"),
        ("/answers/v1/history/lab/small", {"at": "+1m"}, 400, "at"),
        ("/answers/v1/whatever", {}, 404, None),
        ("/answers/v1/explain/lab/small/more", {}, 404, None),
    ]
    for path, params, status, parameter in cases:
        got, body = await from_file.get(path, **params)
        assert (got, body["error"]["parameter"]) == (status, parameter), (path, params, body)
        assert body["error"]["status"] == status and body["error"]["message"]
    got, body = await from_file.get("/answers/v1/queues", at="yesterday")
    assert "'yesterday'" in body["error"]["message"]
    async with from_file.session.get(from_file.base + "/answers/v1/queues?at=+1m&at=+2m") as r:
        assert r.status == 400 and (await r.json())["error"]["parameter"] == "at"


async def test_the_index_lists_every_path(from_file: Served) -> None:
    status, body = await from_file.get("/answers/v1")
    assert status == 200 and body["version"] == "v1"
    assert [p["path"] for p in body["paths"]] == [
        "/answers/v1/explain/{namespace}/{name}",
        "/answers/v1/history/{namespace}/{name}",
        "/answers/v1/queues",
        "/answers/v1/pending",
        "/answers/v1/replay",
        "/answers/v1/preemptions",
        "/answers/v1/usage",
        "/answers/v1/eta",
        "/answers/v1/simulate",
    ]
    assert {p["path"] for p in body["paths"] if p["method"] == "POST"} == {"/answers/v1/simulate"}


@pytest.mark.parametrize("scenario", sorted(p.stem for p in SCENARIO.parent.glob("*.yaml")))
def test_live_seqs_kept_by_the_listener_equal_the_files(scenario: str, tmp_path: Path) -> None:
    # Remembered at some moment (read from the file up to it), then kept up to date event by event: at the end each
    # remembered job's seqs are what `pending_seqs` reads from the whole file.
    from daemon.eventlog import codec  # noqa: PLC0415
    from daemon.query.listing import pending_seqs  # noqa: PLC0415

    db = tmp_path / "log.db"
    done = subprocess.run(
        [sys.executable, "-m", "daemon.cli", "simulate", str(SCENARIO.parent / f"{scenario}.yaml"), "--db", str(db)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    with LogReader(db) as reader:
        rows = list(reader.iter_events())
        last = rows[-1].seq
        jobs = sorted({r.subject[4:] for r in rows if r.subject.startswith("job/")})
        checked = 0
        for stop in (last // 4, last // 2, 3 * last // 4):
            live = LiveSeqs()
            ask = live.seqs(reader, stop)
            for key in jobs:  # every job, pending or not: the rule is the same
                assert ask(key) == pending_seqs(reader, stop)(key)
            for row in rows[stop:]:
                live.apply(codec.decode(row.type, row.version, row.payload, seq=row.seq), row.seq)
            at_end = pending_seqs(reader, last)
            remembered = live.seqs(reader, last)
            for key in jobs:
                assert remembered(key) == at_end(key), (scenario, stop, key)
                checked += 1
        assert checked == 3 * len(jobs) > 0


@pytest.fixture
def reclaim_db(tmp_path: Path) -> Path:
    """The reclaim sample cut at 40 minutes: two preemptions, a borrower pending with an estimate."""
    return simulate(
        ROOT / "config" / "samples" / "cohort-borrow-reclaim.yaml", tmp_path / "reclaim.db", "--until", "40m"
    )


async def test_preemptions_usage_and_eta_are_the_clis_answers(reclaim_db: Path) -> None:
    """Issue 26's answers over HTTP: each body is the CLI's --json on the same file; bad parameters are named."""
    db = reclaim_db
    async for served in _serve(Answers(db)):
        status, body = await served.get("/answers/v1/preemptions")
        assert status == 200 and body == cli("preemptions", "--db", str(db))
        assert [r["victim"] for r in body["preemptions"]] == ["team-a/a-borrower", "team-b/b-routine"]
        status, body = await served.get("/answers/v1/preemptions", since="+6m", queue="team-b")
        assert status == 200 and body == cli("preemptions", "--db", str(db), "--since", "+6m", "--queue", "team-b")
        status, body = await served.get("/answers/v1/usage", by="namespace")
        assert status == 200 and body == cli("usage", "--db", str(db), "--by", "namespace")
        status, body = await served.get("/answers/v1/eta")
        assert status == 200 and body == cli("eta", "--db", str(db))
        assert [r["job"] for r in body["estimates"]] == ["team-a/a-borrower"]
        status, text = await served.get("/answers/v1/usage", format="text")
        assert status == 200 and text.startswith("usage by clusterqueue")
        for path, params, code, parameter in [
            ("/answers/v1/usage", {"by": "planet"}, 400, "by"),
            ("/answers/v1/preemptions", {"since": "yesterday"}, 400, "since"),
            ("/answers/v1/eta", {"queue": "nope"}, 404, "queue"),
            ("/answers/v1/eta", {"since": "1h"}, 400, "since"),
        ]:
            got, err = await served.get(path, **params)
            assert (got, err["error"]["parameter"]) == (code, parameter), (path, params, err)
