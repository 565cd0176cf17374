"""One /metrics answer for both servers: `admitd run`'s (aiohttp, `daemon.kube.run`) and `admitd simulate
--metrics-port`'s (`serve`, the standard library's, in a thread)."""

from __future__ import annotations

import http.server
import threading
from collections.abc import Callable
from typing import Any

from daemon.metrics.follower import MetricsNotReady
from daemon.metrics.text import CONTENT_TYPE


def scrape(render: Callable[[], bytes]) -> tuple[int, bytes, str]:
    """(HTTP status, body, content type) of one scrape: 200 with the text, 503 while the log is not folded yet
    (`MetricsNotReady`, scrape again), 500 saying why rendering failed."""
    try:
        return 200, render(), CONTENT_TYPE
    except Exception as e:  # a scrape must answer, and say why it failed
        return failed(e)


def failed(e: Exception) -> tuple[int, bytes, str]:
    """The answer of a scrape whose rendering raised `e`: 503 for `MetricsNotReady`, else 500 saying why."""
    if isinstance(e, MetricsNotReady):
        return 503, f"{e}\n".encode(), "text/plain; charset=utf-8"
    return 500, f"rendering metrics failed: {e}\n".encode(), "text/plain; charset=utf-8"


def serve(address: tuple[str, int], render: Callable[[], bytes]) -> http.server.ThreadingHTTPServer:
    """Serve `render()` at /metrics in a daemon thread; stop it with `.shutdown()` and `.server_close()`."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path.split("?")[0] not in ("/metrics", "/"):
                self.send_error(404, "only /metrics is served")
                return
            status, body, content_type = scrape(render)
            if status != 200:
                self.send_error(status, body.decode().strip())  # the reason phrase says why, as the body does
                return
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            pass  # scrapes every 15 s would drown the simulator's output

    server = http.server.ThreadingHTTPServer(address, Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, name="admitd-metrics", daemon=True).start()
    return server
