"""Failures of the Kubernetes API, sorted for the caller: retry later, re-read and retry now, or give up.

    KubeError
    ├── Temporary        the API server is unreachable, overloaded (429) or failing (5xx): retry with backoff
    │   └── Gone         410: a watch's resourceVersion is too old; relist
    ├── Conflict         409: the object changed since it was read; re-read it and try again
    └── Permanent        any other 4xx (403 RBAC denial, 404, 422 invalid): an event and a clear message, no retry
        └── NotFound     404

Every error names the request (method and path) and what the API server said.
"""

from __future__ import annotations


class KubeError(Exception):
    def __init__(self, method: str, path: str, status: int | None, message: str) -> None:
        self.method, self.path, self.status, self.message = method, path, status, message
        code = "" if status is None else f" {status}"
        super().__init__(f"{method} {path}:{code} {message}")


class Temporary(KubeError):
    pass


class Gone(Temporary):
    pass


class Conflict(KubeError):
    pass


class Permanent(KubeError):
    pass


class NotFound(Permanent):
    pass


def from_status(method: str, path: str, status: int, message: str) -> KubeError:
    """The right error for an HTTP status from the API server."""
    if status == 410:
        return Gone(method, path, status, message)
    if status == 409:
        return Conflict(method, path, status, message)
    if status == 404:
        return NotFound(method, path, status, message)
    if status == 429 or status >= 500:
        return Temporary(method, path, status, message)
    return Permanent(method, path, status, message)
