"""`admitd ui --db FILE`: the web view of a log file, read-only, for its owner (everyone who can reach the port sees
everything: it binds to 127.0.0.1 unless told otherwise). It follows the file while another process appends."""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path
from typing import Any

from aiohttp import web

from daemon.answers.answer import Answers
from daemon.cliargs import whole_number
from daemon.eventlog import LogReader
from daemon.obs.logging import get_logger
from daemon.web.policy import Everyone, Policy
from daemon.web.server import WebView

log = get_logger("admitd.web")

ROOT = "/ui"
VIEW = web.AppKey("view", WebView)  # the application's WebView (tests wait for its series)
PAST_MEMORY_MIB = 1024  # the timeline's budget by default (the pages at past moments; a daemon's is smaller)


def add_ui_parser(sub: Any, *, db_default: Path, db_help: str) -> None:
    p = sub.add_parser("ui", help="serve the read-only web view of a log file (http://127.0.0.1:8090/ui/)")
    p.add_argument("--db", type=Path, default=db_default, help=db_help)
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1: this machine only)")
    p.add_argument("--port", type=int, default=8090, help="port to listen on (default 8090)")
    p.add_argument(
        "--past-memory",
        type=_mib,
        default=PAST_MEMORY_MIB,
        metavar="MIB",
        help="memory the timeline kept for pages at past moments may take, in MiB (default "
        f"{PAST_MEMORY_MIB}); with less it forgets older moments sooner (their pages then read the file)",
    )
    p.set_defaults(func=_cmd_ui)


_mib = whole_number(1, "--past-memory must be at least 1 (MiB), got {value}")


def application(
    db: Path, policy: Policy | None = None, *, root: str = ROOT, past_memory_mib: int = PAST_MEMORY_MIB
) -> web.Application:
    """The web view of `db` alone (the `admitd ui` server; tests serve it with their own `policy`)."""
    LogReader(db).close()  # a missing or foreign file is a clear error now, not at the first page
    answers = Answers(db)
    view = WebView(
        db,
        answers,
        policy if policy is not None else Everyone(),
        root=root,
        past_budget_bytes=past_memory_mib * 2**20,
    )
    app = web.Application()
    app[VIEW] = view
    view.add_routes(app)
    if root:

        async def home(_: web.Request) -> web.StreamResponse:
            raise web.HTTPFound(root + "/")

        app.router.add_get("/", home)

    async def close(_: web.Application) -> None:
        answers.close()

    app.on_cleanup.append(close)
    return app


async def serve(db: Path, host: str, port: int, past_memory_mib: int = PAST_MEMORY_MIB) -> None:
    runner = web.AppRunner(application(db, past_memory_mib=past_memory_mib), access_log=None)
    await runner.setup()
    try:
        try:
            await web.TCPSite(runner, host, port).start()
        except OSError as e:
            raise CannotListen(f"admitd ui: cannot listen on {host}:{port}: {e.strerror or e}") from None
        print(f"admitd ui: serving {db} on http://{host}:{port}{ROOT}/ (Ctrl-C stops)", flush=True)
        await asyncio.Event().wait()
    finally:
        await runner.cleanup()


class CannotListen(Exception):
    """The address is taken or not ours: one line, exit 2."""


def _cmd_ui(args: argparse.Namespace) -> int:
    try:
        asyncio.run(serve(args.db, args.host, args.port, args.past_memory))
    except CannotListen as e:
        print(e, file=sys.stderr)
        return 2
    return 0
