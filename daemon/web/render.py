"""The web view's pages as HTML, from the answers' JSON bodies (the same dicts `admitd ... --json` prints): pure
functions of their arguments, no I/O, so that tests check a page from known answers.

Every page is `page(...)`: a header with the time control, then fragments marked `data-frag` that the browser's
script (static/web.js) replaces in place when the log grows, when they differ (no reload, no flicker). Everything
shown that came from the log is escaped (`e`).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from html import escape
from typing import Any
from urllib.parse import quote, urlencode

from daemon.domain.durations import format_seconds
from daemon.domain.quantity import parse_quantity

MAX_ROWS = 200  # pending rows shown on a ClusterQueue page; the rest are counted
MAX_PREEMPTIONS = 50  # the latest preemptions shown on a ClusterQueue page, newest first; the rest are counted


def e(value: object) -> str:
    return escape("" if value is None else str(value), quote=True)


@dataclass(frozen=True, slots=True)
class Moment:
    """The moment a page shows and the log's span, for the time control.

    `at`: the `?at=` text asked for (None: the present); `seq`, `time`, `ms`: the moment answered; `first_ms`,
    `last_ms`: the log's span; `virtual`: a simulated log (times are offsets); `head_seq`: the log's last seq."""

    at: str | None
    seq: int
    time: str | None
    first_ms: int
    last_ms: int
    virtual: bool
    head_seq: int
    ms: int  # the moment's recorded_at


@dataclass(frozen=True, slots=True)
class Links:
    """Where the pages are (`root` is where the web view is mounted, e.g. `/ui`); `at` carried along."""

    root: str
    at: str | None = None

    def _q(self, **params: str | None) -> str:
        given = {k: v for k, v in params.items() if v is not None}
        if self.at is not None and "at" not in params:
            given["at"] = self.at
        return ("?" + urlencode(given)) if given else ""

    def overview(self) -> str:
        return f"{self.root}/" + self._q()

    def queue(self, name: str) -> str:
        return f"{self.root}/clusterqueue/{quote(name, safe='')}" + self._q()

    def job(self, key: str) -> str:
        ns, _, name = key.partition("/")
        return f"{self.root}/job/{quote(ns, safe='')}/{quote(name, safe='')}" + self._q()

    def event(self, seq: int) -> str:
        return f"{self.root}/event/{seq}"

    def static(self, name: str) -> str:
        return f"{self.root}/static/{name}"


Visible = Callable[[str], bool]
"""May the viewer see this namespace's jobs? (`policy.Viewer.namespaces` answered for the namespaces on a page)."""


def _ratio(used: str, nominal: str) -> float | None:
    try:
        n = parse_quantity(nominal)
        u = parse_quantity(used)
    except (ValueError, TypeError):
        return None
    if n <= 0:
        return None
    return u / n


def _bar(used: str, nominal: str) -> str:
    r = _ratio(used, nominal)
    if r is None:
        return ""
    width = min(r, 2.0) * 50  # the bar is 0..200% of nominal; the mark at 50% is nominal
    cls = "over" if r > 1 else ("full" if r >= 0.999 else "ok")
    return (
        f'<span class="bar" title="{r * 100:.0f}% of nominal"><span class="fill {cls}" style="width:{width:.1f}%">'
        f'</span><span class="nominal"></span></span><span class="pct">{r * 100:.0f}%</span>'
    )


def _status(row: Mapping[str, Any]) -> str:
    status = str(row.get("status", ""))
    msg = row.get("status_message")
    cls = "good" if status == "active" else "bad"
    text = e(status) + (f": {e(msg)}" if msg else "")
    return f'<span class="status {cls}">{text}</span>'


def _resources_table(resources: Iterable[Mapping[str, Any]]) -> str:
    rows = []
    for r in resources:
        rows.append(
            "<tr>"
            f"<td>{e(r['flavor'])}</td><td>{e(r['resource'])}</td>"
            f'<td class="num">{e(r["used"])}</td><td class="num">{e(r["nominal"])}</td>'
            f"<td>{_bar(r['used'], r['nominal'])}</td>"
            f'<td class="num">{e(r["borrowed"])}</td><td class="num">{e(r["lent"])}</td>'
            f'<td class="num">{e(r["borrowing_limit"] if r["borrowing_limit"] is not None else "∞")}</td>'
            f'<td class="num">{e(r["lending_limit"] if r["lending_limit"] is not None else "∞")}</td>'
            "</tr>"
        )
    return (
        '<table class="res"><thead><tr><th>flavor</th><th>resource</th><th>used</th><th>nominal</th>'
        '<th title="the black mark is the nominal quota; the bar runs to twice it">usage (| nominal)</th>'
        "<th>borrowed</th><th>lent</th><th>borrowing limit</th><th>lending limit</th></tr></thead>"
        f"<tbody>{''.join(rows)}</tbody></table>"
    )


def _reasons(by_reason: Mapping[str, int]) -> str:
    if not by_reason:
        return ""
    parts = [
        f'<span class="reason">{e(k)}</span>&nbsp;{v}' for k, v in sorted(by_reason.items(), key=lambda kv: -kv[1])
    ]
    return ", ".join(parts)


def by_reason(pending: Mapping[str, Any]) -> dict[str, dict[str, int]]:
    """Each ClusterQueue's pending workloads counted by reason (admitd's, as `views.queues` counts them; those no
    cycle has looked at yet are not counted), from a `pending` answer."""
    out: dict[str, dict[str, int]] = {}
    for cq, rows in pending.get("cluster_queues", {}).items():
        counts = out.setdefault(cq, {})
        for row in rows:
            reason = row.get("reason")
            if reason:
                counts[reason] = counts.get(reason, 0) + 1
    return out


def overview(queues: Mapping[str, Any], reasons: Mapping[str, Mapping[str, int]] | None, links: Links) -> str:
    """The overview's body: what needs attention, then the cohort tree with each ClusterQueue's quota and usage.
    `reasons`: each queue's pending workloads by reason, None when not counted (too many rows at a past moment)."""
    cqs = list(queues.get("cluster_queues", []))
    if reasons is None:
        reasons = {c["name"]: {"reasons on its page": int(c["pending"])} for c in cqs if int(c["pending"])}
    total_pending = sum(int(c["pending"]) for c in cqs)
    total_admitted = sum(int(c["admitted"]) for c in cqs)
    not_active = [c for c in cqs if c["status"] != "active"]
    attention = []
    for c in not_active:
        attention.append(
            f'<li class="bad"><a href="{e(links.queue(c["name"]))}">{e(c["name"])}</a> is {_status(c)}'
            f" — {int(c['pending'])} pending cannot be admitted</li>"
        )
    for c in cqs:
        if c["status"] == "active" and int(c["pending"]) > 0:
            attention.append(
                f'<li><a href="{e(links.queue(c["name"]))}">{e(c["name"])}</a>: {int(c["pending"])} pending — '
                f"{_reasons(reasons.get(c['name'], {}))}</li>"
            )
    summary = (
        f'<p class="summary" data-frag="summary"><b id="n-queues">{len(cqs)}</b> ClusterQueues · '
        f'<b id="n-pending">{total_pending}</b> pending · <b id="n-admitted">{total_admitted}</b> admitted · '
        f'<b id="n-inactive" class="{"bad" if not_active else ""}">{len(not_active)}</b> not active</p>'
    )
    attention_html = (
        f'<section data-frag="attention"><h2>Needs attention</h2><ul class="attention">{"".join(attention)}</ul>'
        "</section>"
        if attention
        else '<section data-frag="attention"><h2>Needs attention</h2><p class="good">nothing: every ClusterQueue is'
        " active and none has pending workloads</p></section>"
    )
    by_cohort: dict[str | None, list[Mapping[str, Any]]] = {}
    for c in cqs:
        by_cohort.setdefault(c.get("cohort"), []).append(c)
    groups = []
    for cohort in sorted(by_cohort, key=lambda k: (k is None, k or "")):
        members = by_cohort[cohort]
        head = f"cohort <b>{e(cohort)}</b>" if cohort is not None else "no cohort"
        items = []
        for c in members:
            items.append(
                f'<div class="cq" data-cq="{e(c["name"])}"><h3><a href="{e(links.queue(c["name"]))}">'
                f"{e(c['name'])}</a> {_status(c)} "
                f'<span class="counts"><span class="pending-count">{int(c["pending"])}</span> pending · '
                f'<span class="admitted-count">{int(c["admitted"])}</span> admitted</span></h3>'
                f'<div class="why">{_reasons(reasons.get(c["name"], {}))}</div>'
                f"{_resources_table(c.get('resources', []))}</div>"
            )
        groups.append(f'<li class="cohort"><div class="cohort-name">{head}</div>{"".join(items)}</li>')
    tree = (
        f'<section data-frag="tree"><h2>Cohorts and ClusterQueues</h2><ul class="tree">{"".join(groups)}</ul></section>'
    )
    return summary + attention_html + tree


def plot_data(points: Mapping[str, Any]) -> str:
    """The JSON a plot reads (embedded in the page: static/web.js draws it with uPlot)."""
    text = json.dumps(points, separators=(",", ":"))
    # A <script> element's text is not HTML-decoded: escape only what could end it or open a comment.
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def cluster_queue(
    name: str,
    row: Mapping[str, Any] | None,
    pending_rows: Sequence[Mapping[str, Any]],
    preemptions: Mapping[str, Any] | None,
    admissions: Sequence[Mapping[str, Any]],
    etas: Mapping[str, Mapping[str, Any]],
    plots: Mapping[str, Any],
    visible: Visible,
    links: Links,
) -> str:
    """A ClusterQueue's page: figures, plots over time, its pending workloads in order, admissions, preemptions."""
    if row is None:
        return f'<p class="bad">no ClusterQueue {e(name)} at this moment</p>'
    head = (
        f'<section data-frag="figures"><h2>{e(name)} {_status(row)}</h2>'
        f'<p class="summary">cohort {e(row.get("cohort") or "none")} · '
        f'<b id="n-pending">{int(row["pending"])}</b> pending · <b id="n-admitted">{int(row["admitted"])}</b> admitted'
        f"</p>{_resources_table(row.get('resources', []))}</section>"
    )
    plot = (
        '<section><h2>Over time</h2><div class="plots">'
        '<figure><figcaption>pending and admitted workloads</figcaption><div class="plot" id="plot-depth"></div>'
        "</figure>"
        "<figure><figcaption>usage per flavor and resource (dashed: nominal)</figcaption>"
        '<div class="plot" id="plot-usage"></div></figure></div>'
        f'<script type="application/json" id="plot-data" data-frag="plot-data">{plot_data(plots)}</script>'
        "</section>"
    )
    rows = []
    hidden = 0
    for p in pending_rows[:MAX_ROWS]:
        job = str(p["job"])
        ns = job.partition("/")[0]
        eta = etas.get(job, {})
        eta_text = eta.get("p50") or "—"
        if eta.get("p90"):
            eta_text += f" (p90 {eta['p90']})"
        if not visible(ns):
            hidden += 1
            rows.append(
                f'<tr class="hidden-job"><td class="num">{int(p["position"])}</td><td class="num">'
                f'{int(p["local_queue_position"])}</td><td colspan="5"><i>a job in a namespace you may not see</i></td>'
                "</tr>"
            )
            continue
        reason = p.get("reason") or "not yet evaluated"
        reason_seq = p.get("reason_seq")
        kueue = p.get("kueue_reason")
        reason_html = f'<span class="reason" title="Kueue: {e(kueue)}">{e(reason)}</span>'
        if reason_seq is not None:
            reason_html = f'<a href="{e(links.event(int(reason_seq)))}">{reason_html}</a>'
        rows.append(
            f'<tr class="pending-row" data-job="{e(job)}"><td class="num">{int(p["position"])}</td>'
            f'<td class="num">{int(p["local_queue_position"])}</td>'
            f'<td><a href="{e(links.job(job))}">{e(job)}</a></td><td class="num">{e(p["priority"])}</td>'
            f'<td>{e(p["queued_at"])}</td><td>{reason_html} <span class="msg">{e(p.get("message") or "")}</span></td>'
            f"<td>{e(eta_text)}</td></tr>"
        )
    more = int(row["pending"]) - min(len(pending_rows), MAX_ROWS)
    pend = (
        f'<section data-frag="pending"><h2>Pending, in admission order ({int(row["pending"])})</h2>'
        + (
            '<table class="pending"><thead><tr><th>pos</th><th>LQ pos</th><th>job</th><th>priority</th>'
            "<th>queued</th><th>reason</th><th>estimated start</th></tr></thead>"
            f"<tbody>{''.join(rows)}</tbody></table>"
            if rows
            else '<p class="good">none pending</p>'
        )
        + (
            f'<p id="more">and {more} more (all of them: <code>admitd pending --queue {e(name)}</code>)</p>'
            if more > 0
            else ""
        )
        + "</section>"
    )
    adm = []
    for a in admissions:
        job = str(a["job"])
        shown = f'<a href="{e(links.job(job))}">{e(job)}</a>' if visible(job.partition("/")[0]) else "<i>hidden</i>"
        adm.append(
            f'<tr><td>{e(a["time"])}</td><td>{shown}</td><td><a href="{e(links.event(int(a["seq"])))}">'
            f"seq {int(a['seq'])}</a></td></tr>"
        )
    adm_html = (
        '<section data-frag="admissions"><h2>Recent admissions</h2>'
        + (
            "<table><thead><tr><th>time</th><th>job</th><th>event</th></tr></thead>"
            f"<tbody>{''.join(adm)}</tbody></table>"
            if adm
            else "<p>none recorded</p>"
        )
        + "</section>"
    )
    pre = []
    all_pre = (preemptions or {}).get("preemptions", [])
    for x in reversed(all_pre[-MAX_PREEMPTIONS:]):
        victim, preemptor = str(x["victim"]), str(x["preemptor"])

        def who(job: str) -> str:
            if visible(job.partition("/")[0]):
                return f'<a href="{e(links.job(job))}">{e(job)}</a>'
            return "<i>hidden</i>"

        pre.append(
            f"<tr><td>{e(x['at'])}</td><td>{who(victim)} ({e(x['victimClusterQueue'])})</td>"
            f"<td>{who(preemptor)} ({e(x['preemptorClusterQueue'])})</td><td>{e(x['rule'])}</td>"
            f'<td class="num">{e(x.get("lostGpuHours"))}</td>'
            f'<td><a href="{e(links.event(int(x["seq"])))}">seq {int(x["seq"])}</a></td></tr>'
        )
    pre_html = (
        f'<section data-frag="preemptions"><h2>Preemptions of or by {e(name)} ({len(all_pre)}'
        + (f", the latest {MAX_PREEMPTIONS}" if len(all_pre) > MAX_PREEMPTIONS else "")
        + ")</h2>"
        + (
            "<table><thead><tr><th>time</th><th>victim</th><th>preemptor</th><th>rule</th><th>GPU-hours lost</th>"
            f"<th>event</th></tr></thead><tbody>{''.join(pre)}</tbody></table>"
            if pre
            else ("<p>none</p>" if preemptions is not None else '<p data-later="1">still reading the log…</p>')
        )
        + "</section>"
    )
    return head + pend + plot + adm_html + pre_html


def job(
    key: str,
    history: Mapping[str, Any] | None,
    explain: Mapping[str, Any] | None,
    error: str | None,
    links: Links,
) -> str:
    """A job's page: the explain statements (each linked to its event), then its timeline."""
    parts = [f"<h2>job {e(key)}</h2>"]
    if error is not None:
        parts.append(f'<p class="bad" id="job-error">{e(error)}</p>')
    if explain is not None:
        status = explain.get("status")
        pending = explain.get("pending") or {}
        reason = pending.get("kueue_reason") or pending.get("reason")
        verdict = e(status) + (f': <span class="reason" id="job-reason">{e(reason)}</span>' if reason else "")
        pos = explain.get("position") or {}
        where = explain.get("cluster_queue") or {}
        cq = where.get("name")
        cq_html = f' in <a href="{e(links.queue(cq))}">{e(cq)}</a>' if cq else ""
        pos_html = (
            f" · position {int(pos['cluster_queue'])} of {int(pos['pending_in_cluster_queue'])} pending"
            if pos.get("cluster_queue") is not None and pos.get("pending_in_cluster_queue") is not None
            else ""
        )
        stmts = "".join(
            f'<li><a class="seq" href="{e(links.event(int(s["seq"])))}">seq {int(s["seq"])}</a> {e(s["text"])}</li>'
            for s in explain.get("statements", [])
        )
        parts.append(
            f'<section data-frag="explain"><p class="summary" id="job-status">{verdict}{cq_html}{pos_html}</p>'
            f'<h3>Why (as of {e((explain.get("at") or {}).get("time"))})</h3><ul class="statements">{stmts}</ul>'
            "</section>"
        )
    if history is not None:
        items = "".join(
            f'<tr class="ev-{e(h.get("kind"))}"><td>{e(h.get("time"))}</td><td>{e(h.get("kind"))}</td>'
            f"<td>{_linked_text(h, links)}</td>"
            f'<td><a href="{e(links.event(int(h["seq"])))}">seq {int(h["seq"])}</a></td></tr>'
            for h in history.get("events", [])
        )
        whole = "over its whole life in the log (past this moment too): " if links.at is not None else ""
        parts.append(
            f'<section data-frag="timeline"><h3>Timeline</h3><p>{whole}{e(history.get("status"))} · waited '
            f"{_secs(history.get('waiting_seconds'))} · ran {_secs(history.get('running_seconds'))} · "
            f"{e(history.get('admissions'))} admission(s) · {e(history.get('preemptions'))} preemption(s)</p>"
            f'<table class="timeline"><thead><tr><th>time</th><th>what</th><th>detail</th><th>event</th></tr></thead>'
            f"<tbody>{items}</tbody></table></section>"
        )
    return "".join(parts)


def _secs(value: object) -> str:
    if not isinstance(value, int | float):
        return "—"
    return format_seconds(int(value * 1000))


def _linked_text(h: Mapping[str, Any], links: Links) -> str:
    text = e(h.get("text"))
    preemptor = h.get("preemptor")
    if preemptor:
        text += f' — by <a href="{e(links.job(str(preemptor)))}">{e(preemptor)}</a>'
    return text


def event(row: Mapping[str, Any] | None, seq: int, links: Links) -> str:
    """One event of the log, as stored: seq, type, time, subject, cause and payload."""
    if row is None:
        return f'<p class="bad">no event with seq {seq} in the log</p>'
    subject = str(row["subject"])
    subject_html = e(subject)
    if subject.startswith("job/") and subject.count("/") == 2:
        subject_html = f'<a href="{e(links.job(subject[4:]))}">{e(subject)}</a>'
    elif subject.startswith("clusterqueue/"):
        subject_html = f'<a href="{e(links.queue(subject.partition("/")[2]))}">{e(subject)}</a>'
    cause = row.get("cause")
    cause_html = f'<a href="{e(links.event(int(cause)))}">seq {int(cause)}</a>' if cause is not None else "—"
    nav = (
        f'<a href="{e(links.event(seq - 1))}">← seq {seq - 1}</a> · ' if seq > 1 else ""
    ) + f'<a href="{e(links.event(seq + 1))}">seq {seq + 1} →</a>'
    return (
        f'<h2>event <span id="event-seq">{seq}</span>: <span id="event-type">{e(row["type"])}</span></h2>'
        f'<p class="nav">{nav} · <a id="as-of" href="{e(links.root)}/?{urlencode({"at": str(row["time"])})}">'
        'the queues as of this event</a></p><table class="kv">'
        f"<tr><th>time</th><td>{e(row['time'])}</td></tr>"
        f"<tr><th>type</th><td>{e(row['type'])} (version {e(row['version'])})</td></tr>"
        f"<tr><th>subject</th><td>{subject_html}</td></tr>"
        f"<tr><th>caused by</th><td>{cause_html}</td></tr>"
        f"<tr><th>hash</th><td><code>{e(row['hash'])}</code></td></tr></table>"
        f'<h3>payload</h3><pre class="payload">{e(json.dumps(row["payload"], indent=2, sort_keys=True))}</pre>'
    )


def page(title: str, body: str, moment: Moment | None, links: Links, *, error: str | None = None) -> str:
    """A whole page: header (navigation and the time control), an error banner if any, the body."""
    control = ""
    if moment is not None:
        value = moment.ms
        shown = "now (follows the log)" if moment.at is None else f"as of {moment.time} (seq {moment.seq})"
        control = (
            f'<form class="time" method="get" id="time-form" data-first="{moment.first_ms}" '
            f'data-last="{moment.last_ms}" data-virtual="{1 if moment.virtual else 0}">'
            f'<input type="range" id="time-slider" min="{moment.first_ms}" max="{moment.last_ms}" '
            f'value="{value}" aria-label="moment">'
            f'<input type="text" id="time-at" name="at" value="{e(moment.at or "")}" '
            f'placeholder="{"+1m30s or -10m" if moment.virtual else "2026-12-01T03:00:00Z or -2h"}" size="24">'
            f'<button type="submit">show</button> <a href="?" id="time-now">now</a>'
            f' <span class="moment" id="moment" data-frag="moment">{e(shown)}</span></form>'
        )
    banner = f'<p class="error" id="error">{e(error)}</p>' if error else ""
    live = "1" if moment is not None and moment.at is None else "0"
    head_seq = moment.head_seq if moment is not None else 0
    return (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f'<title>{e(title)} · admitd</title><link rel="icon" href="data:,">'
        f'<link rel="stylesheet" href="{e(links.static("uPlot.min.css"))}">'
        f'<link rel="stylesheet" href="{e(links.static("web.css"))}">'
        f'<script src="{e(links.static("uPlot.iife.min.js"))}" defer></script>'
        f'<script src="{e(links.static("web.js"))}" defer></script></head>'
        f'<body data-root="{e(links.root)}" data-live="{live}" data-seq="{head_seq}">'
        f'<header><a class="home" href="{e(links.overview())}">admitd</a> <span class="title">{e(title)}</span>'
        f"{control}</header>{banner}<main>{body}</main></body></html>"
    )


def login(after: str, why: str, links: Links) -> str:
    """The sign-in form: a bearer token (`kubectl create token NAME`), kept by the browser in a cookie."""
    return (
        f'<h2>Sign in</h2><p class="bad" id="error-message">{e(why)}</p>'
        "<p>Paste a Kubernetes bearer token (for example <code>kubectl create token SERVICEACCOUNT -n NS</code>). "
        "The API server checks it; you see the queues if you may list ClusterQueues, and a namespace's jobs if you "
        "may get its Workloads.</p>"
        f'<form method="post" action="{e(links.root)}/login" id="login">'
        f'<input type="hidden" name="next" value="{e(after)}">'
        '<input type="password" name="token" id="token" size="60" autocomplete="off" required> '
        '<button type="submit">sign in</button></form>'
    )


def error_page(status: int, message: str, links: Links) -> str:
    return page(f"{status}", f'<p class="bad" id="error-message">{e(message)}</p>', None, links)
