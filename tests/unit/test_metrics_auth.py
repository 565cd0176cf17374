"""Who may read /metrics under `--metrics-auth`: the bearer token, the API server's TokenReview and
SubjectAccessReview answers, and their cache.

Real: `daemon.kube.metricsauth.MetricsAuth` and the request bodies it sends. Faked: the API server (a scripted
client that answers TokenReviews and SubjectAccessReviews from tables and counts the calls) and the clock.
"""

from __future__ import annotations

from typing import Any

import pytest

from daemon.kube.errors import Temporary
from daemon.kube.metricsauth import ALLOWED_TTL_S, DENIED_TTL_S, MetricsAuth, bearer_token


class FakeApi:
    """Tokens `users` knows are authenticated as that user; users in `readers` may get /metrics."""

    def __init__(self, users: dict[str, str], readers: set[str], *, down: bool = False) -> None:
        self.users, self.readers, self.down = users, readers, down
        self.calls: list[tuple[str, dict[str, Any]]] = []

    async def request(self, method: str, path: str, *, body: dict[str, Any], **_: object) -> dict[str, Any]:
        assert method == "POST"
        self.calls.append((path, body))
        if self.down:
            raise Temporary(method, path, None, "API server unreachable")
        if path.endswith("/tokenreviews"):
            user = self.users.get(body["spec"]["token"])
            if user is None:
                return {"status": {"authenticated": False, "error": "token expired"}}
            return {"status": {"authenticated": True, "user": {"username": user, "groups": ["g"]}}}
        assert path.endswith("/subjectaccessreviews")
        spec = body["spec"]
        assert spec["nonResourceAttributes"] == {"path": "/metrics", "verb": "get"}
        return {"status": {"allowed": spec["user"] in self.readers}}


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def auth(api: FakeApi, clock: Clock) -> MetricsAuth:
    return MetricsAuth(api, clock=clock)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("header", "token"),
    [
        (None, None),
        ("", None),
        ("Basic abc", None),
        ("Bearer", None),
        ("Bearer   ", None),
        ("Bearer abc", "abc"),
        ("bearer abc ", "abc"),
    ],
    ids=["absent", "empty", "basic", "bearer-without-token", "bearer-blank", "bearer", "lower-case"],
)
def test_the_bearer_token_of_a_header(header: str | None, token: str | None) -> None:
    assert bearer_token(header) == token


@pytest.mark.parametrize(
    ("header", "status", "reason"),
    [
        (None, 401, "a bearer token is required"),
        ("Bearer stolen", 401, "the token is not valid: token expired"),
        ("Bearer tenant", 403, "alice may not get /metrics"),
        ("Bearer prometheus", 200, "system:serviceaccount:monitoring:prometheus"),
    ],
    ids=["no-token", "unknown-token", "authenticated-not-allowed", "allowed"],
)
async def test_only_a_caller_rbac_allows_reads_metrics(header: str | None, status: int, reason: str) -> None:
    api = FakeApi(
        {"tenant": "alice", "prometheus": "system:serviceaccount:monitoring:prometheus"},
        {"system:serviceaccount:monitoring:prometheus"},
    )
    verdict = await auth(api, Clock()).check(header)
    assert verdict.status == status
    assert reason in verdict.reason


async def test_answers_are_cached_per_token_for_a_while_and_asked_again_after() -> None:
    api, clock = FakeApi({"p-secret-token": "prom", "t": "alice"}, {"prom"}), Clock()
    checker = auth(api, clock)
    for _ in range(5):
        assert (await checker.check("Bearer p-secret-token")).status == 200
        assert (await checker.check("Bearer t")).status == 403
    assert len(api.calls) == 4  # one TokenReview and one SubjectAccessReview per token
    assert all(b"p-secret-token" not in k for k in checker._cache)  # the cache keeps a digest, never the token
    clock.t += DENIED_TTL_S + 0.1
    assert (await checker.check("Bearer t")).status == 403
    assert (await checker.check("Bearer p-secret-token")).status == 200
    assert len(api.calls) == 6  # the denial was asked again, the allowance still cached
    clock.t += ALLOWED_TTL_S
    api.readers.clear()  # the RoleBinding was removed: within a minute the scraper is refused
    assert (await checker.check("Bearer p-secret-token")).status == 403


async def test_an_unreachable_api_server_refuses_with_503_and_is_asked_again_next_time() -> None:
    api, clock = FakeApi({"p": "prom"}, {"prom"}, down=True), Clock()
    checker = auth(api, clock)
    verdict = await checker.check("Bearer p")
    assert verdict.status == 503 and "API server unreachable" in verdict.reason
    api.down = False
    assert (await checker.check("Bearer p")).status == 200
