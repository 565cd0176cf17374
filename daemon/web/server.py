"""The web view on an aiohttp application: `admitd ui --db FILE` serves it alone, `admitd run --ui` on its HTTP port.

    GET {root}/                              overview: the cohort tree, each ClusterQueue's quota, usage and counts
    GET {root}/clusterqueue/NAME             a ClusterQueue: plots over time, its pending workloads, admissions...
    GET {root}/job/NAMESPACE/NAME            a job: the explain statements and its timeline
    GET {root}/event/SEQ                     one event of the log
    GET {root}/api/head                      {"seq": N}: the log's last seq (pages poll it to follow the log)
    GET {root}/static/FILE                   the vendored assets (uPlot) and the page script
    POST {root}/login                        the sign-in form: keeps a bearer token in a cookie (policies that need one)

Each page takes `?at=TIME` (as `admitd queues --at`): the page as of that moment. The figures come from the
answers (`daemon.answers.Answers`: the daemon's live fold at the present, the file for the past); the plots from a
`Series` folded once in a worker thread and followed as the log grows; the slow whole-log answers (estimated
starts, preemptions) are computed in the background once per new head and shown when ready. At a past moment the
series has folded past, a page's answers are built from the series' in-memory timeline instead of the file's
snapshot: its `Timeline` holds every record as it was then (`_past`: the same functions, the same JSON, nothing
decoded or folded instead of a snapshot decoded and up to 20,000 events). In `admitd run --ui` the timeline is the
daemon's (`timeline=`), fed by its one fold (`views.follow.CatchingUp.add_folded`: the catch-up, then the
recorder). Only a moment the timeline does not cover (forgotten, or while it was paused: `Timeline.observe`; or not
folded yet) is the file's answer.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aiohttp import web

from daemon.answers.answer import Answers, BadRequest, Query, Rendered, parse, present_moment
from daemon.answers.answer import render as render_answer
from daemon.domain import events as ev
from daemon.domain.state import Phase, State
from daemon.eventlog import EventLogError, LogReader
from daemon.eventlog.codec import encode_json
from daemon.obs.logging import get_logger
from daemon.query import explain as explain_mod
from daemon.query.history import job_events
from daemon.query.listing import pending_entries, pending_seqs, queues_json
from daemon.query.moment import (
    Clock,
    Moment,
    QueryError,
    Timeline,
    clock_of,
    parse_time,
    partial_state_at,
    state_at,
)
from daemon.views.series import QueueSeries
from daemon.web import render
from daemon.web.policy import TOKEN_COOKIE, Everyone, Policy, Viewer
from daemon.web.series import Series

log = get_logger("admitd.web")

STATIC = Path(__file__).resolve().parent / "static"
FOLLOW_EVERY_S = 1.0
FOLLOW_CHUNK = 10_000  # events folded per hold of the series' lock (a page waits at most that long for it)
POINTS = 300  # the most points a plot is sent
REASONS_FROM_ROWS = 2_000  # a past moment's overview counts reasons from the pending rows up to this many
WAIT_S = 0.5  # how long a page waits for the first whole-log answer (estimates, preemptions) before it goes on
BACKGROUND_EVERY_S = 30.0  # how often the estimates and the preemptions are computed again on a growing log
DAEMON_PAST_BUDGET_BYTES = 128 * 2**20  # the timeline's budget in `admitd run --ui` (`admitd ui`: --past-memory)


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


class _Background:
    """A whole-log answer computed in a worker thread, again when the log has grown but at most once every
    `every_s` (in a daemon it shares the process with the admission loop); `get` returns the latest one ready."""

    def __init__(self, compute: Any, every_s: float = BACKGROUND_EVERY_S) -> None:
        self.compute = compute
        self.every_s = every_s
        self.value: Any = None
        self.seq = -1
        self._started = -float("inf")
        self._task: asyncio.Task[None] | None = None

    async def get(self, head: int, wait_s: float = WAIT_S) -> Any:
        """The latest answer ready; before the first one, waits up to `wait_s` for it (None: not yet)."""
        now = time.monotonic()
        idle = self._task is None or self._task.done()
        if self.seq != head and idle and now - self._started >= self.every_s:
            self._started = now
            self._task = asyncio.get_running_loop().create_task(self._run(head))
        if self.value is None and self._task is not None and not self._task.done():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(self._task), wait_s)
        return self.value

    async def _run(self, head: int) -> None:
        try:
            self.value = await asyncio.to_thread(self.compute)
            self.seq = head
        except (EventLogError, QueryError, BadRequest) as err:
            log.warning("web: background answer failed", error=str(err))

    async def wait(self) -> None:
        if self._task is not None:
            with contextlib.suppress(Exception):
                await self._task


@dataclass(frozen=True, slots=True)
class _Asked:
    """A page's moment: the moment for the time control and the `at` to ask the answers with."""

    moment: render.Moment
    clock: Clock

    @property
    def past(self) -> Moment | None:
        """The moment as the answers resolve `at` (None: the present)."""
        m = self.moment
        return None if m.at is None else Moment(m.seq, m.ms)


class WebView:
    """The pages of one log: `add_routes` mounts them under `root`."""

    def __init__(
        self,
        db: Path,
        answers: Answers,
        policy: Policy | None = None,
        *,
        root: str = "/ui",
        live: bool = True,
        background_every_s: float = BACKGROUND_EVERY_S,
        series: QueueSeries | None = None,
        series_lock: threading.Lock | None = None,
        past_budget_bytes: int = DAEMON_PAST_BUDGET_BYTES,
        timeline: Timeline | None = None,
    ) -> None:
        """`background_every_s`: how often the whole-log answers (estimated starts, preemptions) are computed again
        while the log grows; each is a fold of the whole log in a worker thread (minutes on a log of a million
        events, bench/RESULTS.md), so a daemon, whose admission loop shares the process, asks it seldom.

        `series`: the plots' series fed by someone else (`admitd run --ui`: by the recorder, `views.follow.CatchingUp`,
        whose `lock` is `series_lock`; it sets `series_ready` at the hand-over), instead of one folded here. With
        it, `timeline`: the records over the log kept by the same fold (`CatchingUp.add_folded`), for the pages at
        a past moment (None: they are the file's answers).

        `past_budget_bytes`: what the own series' timeline (the pages at past moments) may take; the default
        is a daemon's, whose pod has 1 GiB in all (config/manager); `admitd ui` gives them more. A daemon passes
        its `timeline` made within its own budget (`admitd run --ui-past-memory`)."""
        self.db = db
        self.answers = answers
        self.policy: Policy = policy if policy is not None else Everyone()
        self.root = root.rstrip("/")
        self.live = live  # a log being written (the daemon's): the present is now
        self._own: Series | None = None  # the series folded here (`follow`)
        if series is None:
            self._own = series = Series(past_budget_bytes=past_budget_bytes)
        self.series: QueueSeries = series
        self._fed = self._own is None  # the daemon's: not folded here, at its live state once `series_ready`
        self._fed_timeline = timeline if self._fed else None
        self._series_lock = threading.Lock() if series_lock is None else series_lock
        self._reader: LogReader | None = None
        self._series_reader: LogReader | None = None
        self._follower: asyncio.Task[None] | None = None
        self.series_ready = asyncio.Event()
        self._eta = _Background(self._compute_eta, background_every_s)
        self._etas: tuple[dict[str, Any], dict[str, dict[str, Any]]] | None = None
        self._preempted: tuple[dict[str, Any], dict[str, list[dict[str, Any]]]] | None = None
        self._preemptions = _Background(self._compute_preemptions, background_every_s)
        self._past_workers = asyncio.Semaphore(2)  # past moments built at once (each a fold in a worker thread)

    # --- the log ---

    def reader(self) -> LogReader:
        if self._reader is None:
            self._reader = LogReader(self.db)
        return self._reader

    def close(self) -> None:
        if self._reader is not None:
            self._reader.close()
            self._reader = None
        # A fold cancelled on the event loop goes on in its worker thread until its chunk ends: wait for it, so that
        # its connection is never closed under it.
        with self._series_lock:
            if self._series_reader is not None:
                self._series_reader.close()
                self._series_reader = None

    def _follow_some(self) -> int:
        with self._series_lock:
            if self._series_reader is None:
                self._series_reader = LogReader(self.db)
            return self._own.follow(self._series_reader, limit=FOLLOW_CHUNK) if self._own is not None else 0

    async def follow(self) -> None:
        """Keep the plots' series up to the log's end (a task for the server's life)."""
        while True:
            try:
                while await asyncio.to_thread(self._follow_some):
                    pass
                self.series_ready.set()
            except EventLogError as err:
                log.warning("web: cannot follow the log", error=str(err))
            await asyncio.sleep(FOLLOW_EVERY_S)

    def _compute_eta(self) -> dict[str, Any]:
        from daemon.query import eta as eta_mod  # noqa: PLC0415  (the engine: only the estimates need it)

        with LogReader(self.db) as reader:
            body: dict[str, Any] = eta_mod.eta_json(reader, clock_of(reader), queue=None)
            return body

    def _compute_preemptions(self) -> dict[str, Any]:
        from daemon.query import ledger  # noqa: PLC0415

        with LogReader(self.db) as reader:
            clock = clock_of(reader)
            body: dict[str, Any] = ledger.preemptions_json(reader, clock, start_ms=clock.first_ms, queue=None)
            return body

    # --- helpers ---

    def links(self, at: str | None) -> render.Links:
        return render.Links(self.root, at)

    def _moment(self, at: str | None) -> _Asked:
        reader = self.reader()
        try:
            clock = clock_of(reader)
        except QueryError as err:
            raise BadRequest(503, None, str(err)) from None
        now = _now_ms()
        if at is None or at.strip() == "now":
            last_ms = clock.last_ms if clock.virtual or not self.live else max(now, clock.last_ms)
            m = render.Moment(
                None,
                clock.last_seq,
                clock.show(last_ms),
                clock.first_ms,
                last_ms,
                clock.virtual,
                clock.last_seq,
                last_ms,
            )
            return _Asked(m, clock)
        try:
            ms = parse_time(at, clock, now)
        except QueryError as err:
            raise BadRequest(400, "at", str(err)) from None
        if ms < clock.first_ms:
            raise BadRequest(400, "at", f"{at}: before the log begins (at {clock.show(clock.first_ms)})")
        seq = reader.seq_at(ms)
        span_end = clock.last_ms if clock.virtual or not self.live else max(now, clock.last_ms)
        m = render.Moment(at, seq, clock.show(ms), clock.first_ms, span_end, clock.virtual, clock.last_seq, ms)
        return _Asked(m, clock)

    async def _ask(
        self, command: str, at: str | None, job: str | None = None, moment: Moment | None = None, **params: str
    ) -> dict[str, Any]:
        """The answer `command` gives at `at`; at a past `moment` the series' timeline covers, from it (`_past`,
        rows of a `pending` answer then only the first `render.MAX_ROWS` of the queue)."""
        given = {k: [v] for k, v in params.items()}
        if at is not None and at.strip() != "now":
            given["at"] = [at]
        q = parse(command, given, job)
        if not q.present and moment is not None and command in ("queues", "pending", "explain"):
            timeline = self._timeline_for(moment.seq)
            if timeline is not None:
                async with self._past_workers:
                    return await asyncio.to_thread(self._past, q, moment, timeline)
        got = self._from_series(q) if self.answers.state is None and q.present else None
        if got is None:
            got = await self.answers.answer(q)
        body: dict[str, Any] = json.loads(got.body)
        return body

    def _timeline_for(self, seq: int) -> Timeline | None:
        """The series' timeline when it covers `seq` (the series has folded past it, since the timeline's start);
        None: the page is the file's answer.

        The daemon's (`timeline=`) is asked without the series' lock, which its catch-up holds while it folds a
        chunk (this runs on the event loop): a timeline only adds what comes after the last seq it covers, and
        says it covers an event only once all of it is kept (`Timeline`), so a moment it covers is read whole while
        it is fed on another thread."""
        own = self._own
        if own is None:
            fed = self._fed_timeline
            return fed if fed is not None and fed.covers(seq) else None
        with self._series_lock:
            return own.timeline if own.seq >= seq and own.timeline.covers(seq) else None

    def _past(self, q: Query, moment: Moment, timeline: Timeline) -> dict[str, Any]:
        """`q` at a past `moment` from the series' timeline (in a worker thread): the functions the answers call,
        on a state of the records as they were then (`partial_state_at(timeline=)`), so the same JSON (tests
        compare them; `pending` only the first `render.MAX_ROWS` rows of the queue)."""
        try:
            with LogReader(self.db) as reader:
                clock = clock_of(reader)
                seq = moment.seq
                if q.command == "queues" or (q.command == "pending" and q.queue is not None):
                    # A ClusterQueue's page asks for both: one state serves them (the queue's pending whole in it).
                    cqs = () if q.queue is None else (q.queue,)
                    # The queue's first rows only (of thousands, the page shows `render.MAX_ROWS`).
                    first = None if q.queue is None else render.MAX_ROWS
                    got = partial_state_at(reader, seq, cluster_queues=cqs, timeline=timeline, first=first)
                    body: dict[str, Any] = queues_json(got.state, clock, moment, got.pending_counts)
                    if q.queue is not None:
                        try:
                            seqs = timeline.row_seqs(seq) or pending_seqs(reader, seq)
                            rows = pending_entries(got.state, clock, q.queue, seqs, limit=render.MAX_ROWS)
                        except QueryError as e:
                            raise BadRequest(404, "queue", str(e)) from None
                        body = {"cluster_queues": rows, "queues": body}
                elif q.command == "pending":
                    state = state_at(reader, seq, timeline=timeline)
                    seqs = timeline.row_seqs(seq) or pending_seqs(reader, seq)
                    body = {"cluster_queues": pending_entries(state, clock, None, seqs)}
                else:
                    assert q.job is not None
                    try:
                        state = _explain_state(reader, q.job, seq, timeline)
                        x = explain_mod.explain(reader, clock, q.job, moment, state=state)
                    except QueryError as e:
                        raise BadRequest(404, "job", str(e)) from None
                    body = explain_mod.to_json(x, clock)
                same: dict[str, Any] = json.loads(encode_json(body))
                return same
        except EventLogError as e:
            raise BadRequest(503, None, f"the log cannot be read: {e}") from None

    def _first_pending(self, name: str) -> list[dict[str, Any]] | None:
        """The first `render.MAX_ROWS` pending rows of `name` at the present from the series' fold (the rows after
        them are not built: a queue thousands deep costs what its first page costs), as the pending answer has them;
        None when the series is behind the file or the daemon's own fold answers (`admitd run`)."""
        if self.answers.state is not None:
            return None
        with self._series_lock:
            reader = self.reader()
            try:
                clock = clock_of(reader)
            except QueryError:
                return None
            if clock.last_seq != self.series.seq:
                return None
            own = self._own
            if own is None:
                return None
            seqs = own.seqs.seqs(reader, own.seq)
            try:
                got = pending_entries(own.state, clock, name, seqs, limit=render.MAX_ROWS)
            except QueryError:
                return None
            rows = got.get(name, [])
            same: list[dict[str, Any]] = json.loads(encode_json(rows))  # the answer's values exactly (its JSON)
            return same

    def _from_series(self, q: Query) -> Rendered | None:
        """An answer at the present from the series' fold, as the daemon answers from its own (`Answers`), for a
        log file with no daemon's fold at hand (`admitd ui`): None while the series is behind the file."""
        with self._series_lock:
            reader = self.reader()
            try:
                clock = clock_of(reader)
            except QueryError:
                return None
            if clock.last_seq != self.series.seq:
                return None
            moment = (
                present_moment(clock, self.series.seq, _now_ms())
                if self.live
                else Moment(clock.last_seq, clock.last_ms)
            )
            own = self._own
            if own is None:
                return None
            return render_answer(q, reader, clock, moment, own.state, moment.recorded_at, own.seqs)

    async def _viewer(self, request: web.Request) -> Viewer | web.StreamResponse:
        got = await self.policy.viewer(request)
        if isinstance(got, web.Response) and got.status == 401 and not request.path.startswith(self.root + "/api/"):
            # A browser: the sign-in form, which keeps the token in a cookie for the view's pages.
            why = got.text.strip() if got.text else "a bearer token is required"
            links = self.links(None)
            return self._html(render.page("sign in", render.login(request.path_qs, why, links), None, links), 401)
        return got

    async def login(self, request: web.Request) -> web.StreamResponse:
        form = await request.post()
        token = str(form.get("token", "")).strip()
        after = str(form.get("next", "")) or self.root + "/"
        if not after.startswith(self.root + "/") or after.startswith("//"):
            after = self.root + "/"  # only back into the view, never elsewhere
        res = web.Response(status=303, headers={"Location": after})
        if token:
            res.set_cookie(
                TOKEN_COOKIE, token, path=self.root + "/", httponly=True, samesite="Strict", secure=request.secure
            )
        else:
            res.del_cookie(TOKEN_COOKIE, path=self.root + "/")
        return res

    def _html(self, text: str, status: int = 200) -> web.Response:
        return web.Response(text=text, status=status, content_type="text/html", charset="utf-8")

    def _at(self, request: web.Request) -> str | None:
        at = request.query.get("at")
        return at if at is not None and at.strip() else None

    def _refused(self, message: str, at: str | None) -> web.Response:
        return self._html(render.error_page(403, message, self.links(at)), 403)

    # --- pages ---

    async def overview(self, request: web.Request) -> web.StreamResponse:
        at = self._at(request)
        viewer = await self._viewer(request)
        if not isinstance(viewer, Viewer):
            return viewer
        if not viewer.queues:
            return self._refused("you may not list ClusterQueues, so the queues' figures are not shown", at)
        try:
            asked = self._moment(at)
            past = asked.past
            queues = await self._ask("queues", at, moment=past)
            reasons = self._live_reasons(asked.moment.head_seq) if asked.moment.at is None else None
            if reasons is None and sum(int(c["pending"]) for c in queues["cluster_queues"]) <= REASONS_FROM_ROWS:
                reasons = render.by_reason(await self._ask("pending", at, moment=past))
        except BadRequest as err:
            return self._error(err, at)
        links = self.links(at)
        body = render.overview(queues, reasons, links)
        return self._html(render.page("overview", body, asked.moment, links))

    async def cluster_queue(self, request: web.Request) -> web.StreamResponse:
        at = self._at(request)
        name = request.match_info["name"]
        viewer = await self._viewer(request)
        if not isinstance(viewer, Viewer):
            return viewer
        if not viewer.queues:
            return self._refused("you may not list ClusterQueues, so the queues' figures are not shown", at)
        try:
            asked = self._moment(at)
            both = None
            if asked.past is not None and asked.past.seq:
                with contextlib.suppress(BadRequest):  # no such queue then: the queues alone say so below
                    both = await self._ask("pending", at, moment=asked.past, queue=name)
            queues = (
                both["queues"]
                if both is not None and "queues" in both
                else await self._ask("queues", at, moment=asked.past)
            )
            row = next((c for c in queues["cluster_queues"] if c["name"] == name), None)
            pending_rows: list[dict[str, Any]] = []
            if row is not None:
                rows = self._first_pending(name) if at is None else None
                if rows is None and both is not None:
                    rows = both["cluster_queues"].get(name, [])
                if rows is None:
                    pending = await self._ask("pending", at, moment=asked.past, queue=name)
                    rows = pending["cluster_queues"].get(name, [])
                pending_rows = rows
        except BadRequest as err:
            return self._error(err, at)
        moment = asked.moment
        present = moment.at is None
        eta = await self._eta.get(moment.head_seq) if present else None
        etas = self._eta_index(eta)
        pre = await self._preemptions.get(moment.head_seq)
        mine = None
        if pre is not None:
            mine = {
                "preemptions": [x for x in self._preemption_index(pre).get(name, ()) if int(x["seq"]) <= moment.seq]
            }
        jobs = [p["job"] for p in pending_rows] + [a["job"] for a in self._admissions(name, moment)]
        for x in (mine or {}).get("preemptions", []):
            jobs += [x["victim"], x["preemptor"]]
        seen = await viewer.namespaces({str(j).partition("/")[0] for j in jobs})
        links = self.links(at)
        body = render.cluster_queue(
            name,
            row,
            pending_rows,
            mine,
            self._admissions(name, moment),
            etas,
            self.plots(name, asked),
            lambda ns: ns in seen,
            links,
        )
        return self._html(render.page(f"ClusterQueue {name}", body, moment, links))

    def _eta_index(self, body: dict[str, Any] | None) -> dict[str, dict[str, Any]]:
        """The estimates by job, built once per estimate (a deep backlog has a hundred thousand)."""
        if body is None:
            return {}
        if self._etas is None or self._etas[0] is not body:
            self._etas = (body, {x["job"]: x for x in body.get("estimates", [])})
        return self._etas[1]

    def _preemption_index(self, body: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
        """The preemptions by ClusterQueue (the victim's and the preemptor's), in the answer's order, built once per
        answer (a deep backlog's log has tens of thousands)."""
        if self._preempted is None or self._preempted[0] is not body:
            index: dict[str, list[dict[str, Any]]] = {}
            for x in body["preemptions"]:
                for cq in {x["victimClusterQueue"], x["preemptorClusterQueue"]}:
                    index.setdefault(cq, []).append(x)
            self._preempted = (body, index)
        return self._preempted[1]

    def _live_reasons(self, head: int) -> dict[str, dict[str, int]] | None:
        """Each ClusterQueue's pending workloads by reason at the log's end, from the series' fold (its pending
        index: no row is read), or None while the series is behind the log."""
        with self._series_lock:
            if not self.series_ready.is_set() if self._fed else self.series.seq != head:
                return None
            q = self.series.queues
            return {cq: dict(q.pending_counts(cq).by_reason) for cq in self.series.state.cluster_queues}

    def _admissions(self, name: str, moment: render.Moment) -> list[dict[str, Any]]:
        with self._series_lock:
            got = list(self.series.admissions.get(name, ()))
        clock = Clock(moment.virtual, 0, moment.first_ms, 0, moment.last_ms)
        return [{"seq": s, "time": clock.show(t), "job": j} for s, t, j in reversed(got) if s <= moment.seq][:20]

    def plots(self, name: str, asked: _Asked) -> dict[str, Any]:
        with self._series_lock:
            body = self.series.plot(name, asked.moment.ms, POINTS)
        body["virtual"] = asked.clock.virtual
        return body

    async def job(self, request: web.Request) -> web.StreamResponse:
        at = self._at(request)
        ns, name = request.match_info["namespace"], request.match_info["name"]
        key = f"{ns}/{name}"
        viewer = await self._viewer(request)
        if not isinstance(viewer, Viewer):
            return viewer
        if ns not in await viewer.namespaces([ns]):
            return self._refused(f"you may not see the jobs of namespace {ns}", at)
        try:
            asked = self._moment(at)
        except BadRequest as err:
            return self._error(err, at)
        explain = history = None
        error = None
        try:
            explain = await self._ask("explain", at, key, moment=asked.past)
            history = await self._ask("history", None, key)
            if at is not None:
                history = {**history, "events": [h for h in history["events"] if int(h["seq"]) <= asked.moment.seq]}
        except BadRequest as err:
            if err.status >= 500:
                return self._error(err, at)
            error = err.message
        links = self.links(at)
        body = render.job(key, history, explain, error, links)
        return self._html(render.page(f"job {key}", body, asked.moment, links), 200 if error is None else 404)

    async def event(self, request: web.Request) -> web.StreamResponse:
        try:
            seq = int(request.match_info["seq"])
        except ValueError:
            return self._error(BadRequest(400, "seq", "a seq is a whole number"), None)
        viewer = await self._viewer(request)
        if not isinstance(viewer, Viewer):
            return viewer
        try:
            reader = self.reader()
            clock = clock_of(reader)
            row = None
            for r in reader.iter_events(seq - 1, chunk=1):
                if r.seq == seq:
                    row = {
                        "seq": r.seq,
                        "time": clock.show(r.recorded_at),
                        "type": r.type,
                        "version": r.version,
                        "subject": r.subject,
                        "cause": r.cause,
                        "hash": r.hash.hex(),
                        "payload": json.loads(r.payload),
                    }
                break
        except (EventLogError, QueryError) as err:
            return self._error(BadRequest(503, None, str(err)), None)
        if row is not None:
            subject = str(row["subject"])
            if subject.startswith("job/"):
                ns = subject.split("/")[1]
                if ns not in await viewer.namespaces([ns]):
                    return self._refused(f"event {seq} is about a job of namespace {ns}, which you may not see", None)
            elif not viewer.queues:
                return self._refused(f"event {seq} is about the queues, which you may not see", None)
            payload = row["payload"]
            other = payload.get("preemptor") if isinstance(payload, dict) else None
            if isinstance(other, str) and other.partition("/")[0] not in await viewer.namespaces(
                [other.partition("/")[0]]
            ):
                payload["preemptor"] = "(a job in a namespace you may not see)"  # the victim's event names it
        links = self.links(None)
        status = 200 if row is not None else 404
        return self._html(render.page(f"event {seq}", render.event(row, seq, links), None, links), status)

    async def head(self, request: web.Request) -> web.StreamResponse:
        viewer = await self._viewer(request)
        if not isinstance(viewer, Viewer):
            return viewer
        try:
            last = self.reader().last_seq()
        except EventLogError as err:
            return web.json_response({"error": str(err)}, status=503)
        return web.json_response({"seq": last})

    def _error(self, err: BadRequest, at: str | None) -> web.Response:
        message = err.message if err.parameter is None else f"{err.parameter}: {err.message}"
        links = self.links(None)
        text = render.page(
            "error", f'<p><a href="{render.e(links.overview())}">back to now</a></p>', None, links, error=message
        )
        return self._html(text, err.status)

    def add_routes(self, app: web.Application) -> None:
        r = self.root
        app.router.add_get(r + "/", self.overview)
        if r:

            async def bare(_: web.Request) -> web.StreamResponse:
                raise web.HTTPFound(r + "/")

            app.router.add_get(r, bare)
        app.router.add_get(r + "/clusterqueue/{name}", self.cluster_queue)
        app.router.add_get(r + "/job/{namespace}/{name}", self.job)
        app.router.add_get(r + "/event/{seq}", self.event)
        app.router.add_get(r + "/api/head", self.head)
        app.router.add_post(r + "/login", self.login)
        app.router.add_static(r + "/static", STATIC, append_version=False)

        async def start(_: web.Application) -> None:
            if not self._fed:
                self._follower = asyncio.get_running_loop().create_task(self.follow())

        async def stop(_: web.Application) -> None:
            if self._follower is not None:
                self._follower.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await self._follower
            await self._eta.wait()
            await self._preemptions.wait()
            self.close()

        app.on_startup.append(start)
        app.on_cleanup.append(stop)


def _explain_state(reader: LogReader, key: str, seq: int, timeline: Timeline) -> State:
    """The state `explain` reads at `seq` (as `explain._state_for` builds it from the file), from `timeline`: the
    job, every admitted workload and every workload pending in the ClusterQueues its LocalQueues point at (none when
    the job was admitted or gone then: explain reads no queue for it); the whole state when its queue's pending list
    was not loaded."""
    rows = job_events(reader, key, seq)
    if not rows:
        return State(pending_indexes=False)  # explain says the job was not seen yet, before it reads a state
    local_queues = {f"{e.workload.namespace}/{e.workload.queue_name}" for _, e in rows if isinstance(e, ev.JobObserved)}
    covered, rec = timeline.record_at(key, seq)
    if covered and (rec is None or rec.phase is not Phase.PENDING):
        local_queues = set()  # admitted or gone then: explain reads no queue's pending list (nor its position)
    partial = partial_state_at(reader, seq, keys=(key,), local_queues=local_queues, timeline=timeline)
    state = partial.state
    if partial.partial:
        rec = state.workloads.get(key)
        if rec is None or rec.phase is not Phase.PENDING:
            return state
        lq = state.local_queues.get(f"{rec.workload.namespace}/{rec.workload.queue_name}")
        if lq is None or lq.cluster_queue not in state.cluster_queues or lq.cluster_queue in partial.whole_queues:
            return state
        return state_at(reader, seq, timeline=timeline)
    return state
