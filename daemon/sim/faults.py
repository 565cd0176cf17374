"""The faults a simulated cluster injects, as one value read from a spec string (`admitd simulate --faults SPEC`).

A spec is comma-separated `name=value` pairs: durations (Go syntax: `2s`, `500ms`) are upper bounds, each
occurrence drawn uniformly from [0, bound] by the run's seeded generator; rates are probabilities in [0, 1] per
occasion (an actuation call, an observation, a stage step, a preemption). `all` turns every fault on at the rates of
`ALL`; later pairs override it (`all,crash=0`). An empty spec is no fault at all. Every mistake is named: the pair,
the fault, and what was wrong (`FaultSpecError`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from daemon.domain.durations import format_seconds
from daemon.domain.model import Millis
from daemon.manifests.durations import DurationError, parse_duration


class FaultSpecError(ValueError):
    """A fault spec that cannot be read: names the pair and what was wrong with it."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Faults:
    """Every fault of the simulated world. Durations in ms (upper bounds), rates in [0, 1]."""

    unsuspend_latency: Millis = 0  # an unsuspend patch takes up to this long to land (and its reply with it)
    suspend_latency: Millis = 0  # likewise a suspend patch
    evict_latency: Millis = 0  # after a suspension lands, the pods take up to this long to stop (quota freed then)
    watch_delay: Millis = 0  # an observation reaches the daemon up to this late (in order within a kind)
    watch_dup: float = 0.0  # an observation is delivered twice
    watch_drop: float = 0.0  # the stream drops at an observation; the kind is listed again after a watch delay
    api_error: float = 0.0  # a patch is refused with 409, 429 or 500 (nothing applied; retried with backoff)
    timeout: float = 0.0  # a patch's reply is lost after `call_timeout` (applied or not, equally likely)
    call_timeout: Millis = 10_000
    crash: float = 0.0  # the daemon process dies before a stage step, or mid-batch while a patch is in flight
    restart_delay: Millis = 2_000  # a crashed process is back up to this long after (at least half of it)
    delete: float = 0.0  # a job being preempted is deleted before its pods stop
    complete: float = 0.0  # a job being preempted completes before its pods stop
    quota_change: float = 0.0  # at a job's creation, a ClusterQueue's nominal quotas are raised by half
    # At a step of the leader, it cannot renew its Lease: it stops acting and exits (to come back as a standby), and
    # the standby, a second replica that kept its own log current from the same watches, takes over after
    # `takeover_delay`. A patch the old leader sent that lands later than that lands under the new leader.
    lease_loss: float = 0.0
    takeover_delay: Millis = 3_000  # the leader stops 3 s before its Lease can be taken (`daemon.kube.leader`)

    def describe(self) -> str:
        """The spec string that gives this value (only the faults that differ from none)."""
        parts: list[str] = []
        none = Faults()
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if value == getattr(none, f.name):
                continue
            shown = format_seconds(value) if f.name in _DURATIONS else f"{value:g}"
            parts.append(f"{f.name.replace('_', '-')}={shown}")
        return ",".join(parts)

    def without(self, name: str) -> Faults:
        """This value with fault `name` (a field name) off."""
        return dataclasses.replace(self, **{name: getattr(Faults(), name)})

    def active(self) -> tuple[str, ...]:
        """The field names of the faults that are on (durations and rates that differ from none)."""
        none = Faults()
        return tuple(
            f.name
            for f in dataclasses.fields(self)
            if f.name not in _SETTINGS and getattr(self, f.name) != getattr(none, f.name)
        )


_DURATIONS = {
    "unsuspend_latency",
    "suspend_latency",
    "evict_latency",
    "watch_delay",
    "call_timeout",
    "restart_delay",
    "takeover_delay",
}
_SETTINGS = {"call_timeout", "restart_delay", "takeover_delay"}  # how a fault behaves, not a fault of its own

ALL = Faults(
    unsuspend_latency=2_000,
    suspend_latency=2_000,
    evict_latency=30_000,
    watch_delay=1_000,
    watch_dup=0.05,
    watch_drop=0.01,
    api_error=0.05,
    timeout=0.02,
    crash=0.01,
    delete=0.05,
    complete=0.05,
    quota_change=0.01,
    lease_loss=0.005,
)
"""`--faults all`: every fault on, at rates a busy real cluster shows now and then."""

NAMES = tuple(f.name.replace("_", "-") for f in dataclasses.fields(Faults))


def parse_faults(text: str) -> Faults:
    """The faults a spec string names; FaultSpecError (naming the pair) for anything that is not one."""
    values: dict[str, object] = {}
    seen: set[str] = set()
    for raw in text.split(","):
        pair = raw.strip()
        if not pair:
            continue
        if pair == "all":
            values.update({f.name: getattr(ALL, f.name) for f in dataclasses.fields(Faults)})
            continue
        name, eq, value = pair.partition("=")
        name, value = name.strip(), value.strip()
        if not eq:
            raise FaultSpecError(
                f"fault spec {pair!r}: expected name=value (or 'all'); the faults are {', '.join(NAMES)}"
            )
        if name not in NAMES:
            raise FaultSpecError(f"fault spec {pair!r}: unknown fault {name!r}; the faults are {', '.join(NAMES)}")
        if name in seen:
            raise FaultSpecError(f"fault spec {pair!r}: {name} is given twice")
        seen.add(name)
        field = name.replace("-", "_")
        if field in _DURATIONS:
            try:
                values[field] = parse_duration(value)
            except DurationError as e:
                raise FaultSpecError(f"fault spec {pair!r}: {name} takes a duration such as 2s or 500ms: {e}") from e
        else:
            try:
                rate = float(value)
            except ValueError:
                raise FaultSpecError(
                    f"fault spec {pair!r}: {name} takes a rate, a number from 0 to 1 (got {value!r})"
                ) from None
            if not 0.0 <= rate <= 1.0:  # also refuses nan
                raise FaultSpecError(f"fault spec {pair!r}: {name} is a rate and must be from 0 to 1 (got {value})")
            values[field] = rate
    faults = Faults(**values)  # type: ignore[arg-type]  # every key is a field name, every value of its type
    if faults.call_timeout <= 0:
        raise FaultSpecError("fault spec: call-timeout must be more than 0")
    return faults
