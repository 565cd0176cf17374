"""Who sees what in `admitd run --ui`: the viewer's bearer token (header or the sign-in cookie), the API server's
TokenReview and SubjectAccessReview answers, their cache, and the pages they gate.

Real: `daemon.kube.webauth.KubePolicy`, the request bodies it sends, and the web view's aiohttp application (the
pages of a simulated log, through aiohttp's test client). Faked: the API server (a scripted client answering from
tables and counting the calls) and the clock.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer

from daemon.kube.errors import Temporary
from daemon.kube.webauth import ALLOWED_TTL_S, KubePolicy
from daemon.web.cli import VIEW, application
from daemon.web.policy import TOKEN_COOKIE

ROOT = Path(__file__).resolve().parents[2]
SCENARIO = Path(__file__).resolve().parent / "data" / "web-scenario.yaml"


class FakeApi:
    """`users`: token -> user. `rights`: user -> the (verb, resource, namespace) it may; namespace "" cluster-wide."""

    def __init__(self, users: dict[str, str], rights: dict[str, set[tuple[str, str, str]]]) -> None:
        self.users, self.rights, self.down = users, rights, False
        self.calls: list[tuple[str, dict[str, Any]]] = []

    async def request(self, method: str, path: str, *, body: dict[str, Any], **_: object) -> dict[str, Any]:
        assert method == "POST"
        self.calls.append((path, body))
        if self.down:
            raise Temporary(method, path, None, "API server unreachable")
        if path.endswith("/tokenreviews"):
            user = self.users.get(body["spec"]["token"])
            if user is None:
                return {"status": {"authenticated": False}}
            return {"status": {"authenticated": True, "user": {"username": user, "groups": ["g"]}}}
        assert path == "/apis/authorization.k8s.io/v1/subjectaccessreviews"
        spec = body["spec"]
        a = spec["resourceAttributes"]
        assert a["group"] == "kueue.x-k8s.io"
        asked = (a["verb"], a["resource"], a.get("namespace", ""))
        return {"status": {"allowed": asked in self.rights.get(spec["user"], set())}}


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


@pytest.fixture(scope="module")
def db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("webauth") / "web.db"
    subprocess.run(
        [sys.executable, "-m", "daemon.cli", "simulate", str(SCENARIO), "--db", str(path)],
        check=True,
        capture_output=True,
        cwd=ROOT,
        timeout=120,
    )
    return path


API_RIGHTS = {
    "alice": {("list", "clusterqueues", ""), ("get", "workloads", "team-a")},
    "bob": {("get", "workloads", "team-b")},  # no queue figures
}


async def test_the_pages_follow_the_api_servers_answers(db: Path) -> None:
    api = FakeApi({"tok-alice": "alice", "tok-bob": "bob"}, API_RIGHTS)
    clock = Clock()
    policy = KubePolicy(api, clock=clock)  # type: ignore[arg-type]
    app = application(db, policy)
    client: TestClient[object, object] = TestClient(TestServer(app))
    await client.start_server()
    try:
        await app[VIEW].series_ready.wait()
        res = await client.get("/ui/")
        assert res.status == 401 and 'id="login"' in await res.text()  # a browser gets the sign-in form
        res = await client.get("/ui/api/head")
        assert res.status == 401  # the page script gets the status alone
        alice = {"Authorization": "Bearer tok-alice"}
        res = await client.get("/ui/clusterqueue/team-c", headers=alice)
        html = await res.text()
        assert res.status == 200 and "team-c/c-held" not in html and "may not see" in html
        res = await client.get("/ui/clusterqueue/team-a", headers=alice)
        assert "team-a/a-huge" in await res.text()
        assert (await client.get("/ui/job/team-c/c-held", headers=alice)).status == 403
        res = await client.get("/ui/", headers={"Authorization": "Bearer tok-bob"})
        assert res.status == 403  # may not list ClusterQueues
        assert (await client.get("/ui/job/team-b/b-urgent", headers={"Authorization": "Bearer tok-bob"})).status == 200
        res = await client.get("/ui/", headers={"Authorization": "Bearer stolen"})
        assert res.status == 401 and "not valid" in await res.text()
        # Cached: alice's pages again cost the API server nothing, until the verdicts expire.
        before = len(api.calls)
        await client.get("/ui/clusterqueue/team-a", headers=alice)
        assert len(api.calls) == before
        clock.t += ALLOWED_TTL_S + 1
        await client.get("/ui/clusterqueue/team-a", headers=alice)
        assert len(api.calls) > before
        # The sign-in form keeps the token in a cookie; the pages then need no header.
        res = await client.post(
            "/ui/login", data={"token": "tok-alice", "next": "/ui/job/team-a/a-huge"}, allow_redirects=False
        )
        assert res.status == 303 and res.headers["Location"] == "/ui/job/team-a/a-huge"
        cookie = res.cookies[TOKEN_COOKIE]
        assert cookie.value == "tok-alice" and cookie["httponly"] and cookie["samesite"] == "Strict"
        assert (await client.get("/ui/job/team-a/a-huge")).status == 200
        res = await client.post(
            "/ui/login", data={"token": "x", "next": "https://evil.example/"}, allow_redirects=False
        )
        assert res.headers["Location"] == "/ui/"  # never sent anywhere but the view
        # The API server down: 503 saying so, not a page of nothing.
        api.down = True
        clock.t += ALLOWED_TTL_S + 1
        res = await client.get("/ui/", headers=alice)
        assert res.status == 503 and "API server" in await res.text()
    finally:
        await client.close()


async def test_the_token_is_never_kept(db: Path) -> None:
    api = FakeApi({"s3cret-token": "alice"}, API_RIGHTS)
    policy = KubePolicy(api, clock=Clock())  # type: ignore[arg-type]
    app = application(db, policy)
    client: TestClient[object, object] = TestClient(TestServer(app))
    await client.start_server()
    try:
        await client.get("/ui/", headers={"Authorization": "Bearer s3cret-token"})
        assert "s3cret-token" not in repr(policy.__dict__)
    finally:
        await client.close()
