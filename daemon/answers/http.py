"""The answers API on an aiohttp application (`admitd run`'s health server, or its HTTPS port with `--metrics-auth`).

    GET /answers/v1                                   the paths and their parameters
    GET /answers/v1/explain/NAMESPACE/NAME[?at=TIME][&format=text]
    GET /answers/v1/history/NAMESPACE/NAME[?format=text]
    GET /answers/v1/queues[?at=TIME][&format=text]
    GET /answers/v1/pending[?queue=CQ|NS/LQ][&at=TIME][&format=text]
    GET /answers/v1/replay?at=TIME | ?seq=N
    GET /answers/v1/preemptions[?since=WHEN][&queue=CQ][&format=text]
    GET /answers/v1/usage[?since=WHEN][&by=clusterqueue|localqueue|namespace][&format=text]
    GET /answers/v1/eta[?queue=CQ][&format=text]
    POST /answers/v1/simulate[?name=JOB.yaml][&format=text]   the body: JOB.yaml (a dry run, nothing written)

200 with the CLI's `--json` body (or its text with `format=text`); 4xx/5xx with `{"error": {"status", "parameter",
"message"}}`. `guard` (optional) decides who may ask: it returns a response to refuse with, or None to go on.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from aiohttp import web

from daemon.answers.answer import COMMANDS, PREFIX, Answers, BadRequest, error_body, parse, paths
from daemon.eventlog.codec import encode_json
from daemon.obs.logging import get_logger

log = get_logger("admitd.answers")

Guard = Callable[[web.Request], Awaitable[web.StreamResponse | None]]


def _error(e: BadRequest) -> web.Response:
    return web.Response(body=error_body(e), status=e.status, content_type="application/json")


def add_routes(app: web.Application, answers: Answers, guard: Guard | None = None) -> None:
    async def handle(request: web.Request) -> web.StreamResponse:
        if guard is not None:
            refused = await guard(request)
            if refused is not None:
                return refused
        info = request.match_info
        command = info.get("command", "")
        job = f"{info['namespace']}/{info['name']}" if "namespace" in info else None
        params = {name: request.query.getall(name) for name in request.query}
        try:
            if command == "" and job is None and "tail" not in info:
                if params:
                    raise BadRequest(400, next(iter(params)), f"{PREFIX} takes no parameters")
                return web.Response(body=encode_json(paths()), content_type="application/json")
            if "tail" in info:
                raise BadRequest(404, None, f"no path {request.path}; see {PREFIX} for the paths")
            if job is None and command in ("explain", "history"):
                raise BadRequest(400, "job", f"{command} needs a job as {PREFIX}/{command}/NAMESPACE/NAME")
            q = parse(command, params, job)
            got = await answers.answer(q)
        except BadRequest as e:
            return _error(e)
        return web.Response(body=got.body, headers={"Content-Type": got.content_type})

    async def simulate(request: web.Request) -> web.StreamResponse:
        if guard is not None:
            refused = await guard(request)
            if refused is not None:
                return refused
        params = {name: request.query.getall(name) for name in request.query}
        try:
            for name, values in params.items():
                if name not in COMMANDS["simulate"]:
                    raise BadRequest(400, name, f"simulate takes no parameter {name!r}; it takes name, format")
                if len(values) != 1:
                    raise BadRequest(400, name, f"{name!r} is given {len(values)} times; give it once")
            fmt = request.query.get("format", "json")
            if fmt not in ("json", "text"):
                raise BadRequest(400, "format", f"format must be json or text, got {fmt!r}")
            body = await request.read()
            if not body.strip():
                raise BadRequest(400, "body", "POST the job(s) to try as the body: JOB.yaml")
            got = await answers.simulate(request.query.get("name", "JOB.yaml"), body, fmt == "text")
        except BadRequest as e:
            return _error(e)
        return web.Response(body=got.body, headers={"Content-Type": got.content_type})

    app.router.add_post(PREFIX + "/simulate", simulate)
    app.router.add_get(PREFIX, handle)
    app.router.add_get(PREFIX + "/{command:explain|history}/{namespace}/{name}", handle)
    app.router.add_get(PREFIX + "/{command:[a-z]+}", handle)
    app.router.add_get(PREFIX + "/{tail:.+}", handle)
