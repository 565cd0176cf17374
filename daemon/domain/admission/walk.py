"""Phase 3a: a ClusterQueue's pending workloads as Kueue's `ClusterQueue` heap offers them, one head at a time.

A BestEffortFIFO queue offers its sticky members first (a workload waiting for the victims it preempted, Kueue
#6929), then the rest in queue order. The walk costs what it writes, not the queue's depth (Kueue's equivalence
hashing and inadmissible set play this part there): with the fold's `PendingIndex` the rest is walked through runs
of alike workloads (same shape and priority, same coarse last reason) merged in queue order, and a run whose every
member would be NoFit and write nothing is stepped over whole (`Queue.quiet`). Everything else is visited as
before, so the events are exactly those of visiting every workload (tests/unit/test_pending_runs.py and
test_engine_properties.py check this against `view.pending_index=None`). A walk that stops at an entry stands at
that entry: if the entry is offered again in a later pass, the walk resumes there, in the tree as that pass finds
it.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field

from daemon.domain.admission.ledger import Hold
from daemon.domain.admission.memo import ClassKey, who
from daemon.domain.admission.outcome import Kind, Outcome
from daemon.domain.flavors import FlavorAssigner
from daemon.domain.model import ClusterQueue
from daemon.domain.ordering import entry_order
from daemon.domain.quota import Node
from daemon.domain.view import Coarse, PendingIndex, PendingWorkload, Shape, is_sticky, queue_key

_RunEntry = tuple[
    tuple[int, int, str], int, PendingWorkload, Iterator[PendingWorkload], tuple[Shape, tuple[int, ...]], Coarse | None
]
"""(queue key of the run's next member, tie-break, that member, the rest of the run, class, coarse reason)."""

State = tuple[int, int]
"""A tree's state in a call: (its version, the number of workloads claimed so far)."""


class Runs:
    """The non-sticky part of a BestEffortFIFO queue, walked through its `PendingIndex` instead of one workload at
    a time. The runs are merged in queue order with a heap; a run whose members would all be quiet is dropped from
    the heap, which is rebuilt from where the walk stands whenever the tree's state changes: at the member offered
    (and not walked past yet, e.g. an entry that no longer fits, offered again next pass), or after the last member
    walked past."""

    __slots__ = ("heap", "inclusive", "index", "start", "state", "ties")

    def __init__(self, index: PendingIndex) -> None:
        self.index = index
        self.start: tuple[int, int, str] | None = None  # the queue key where the walk stands (None: at the start)
        self.inclusive = True  # whether the member at `start` is still to walk
        self.heap: list[_RunEntry] = []
        self.state: State | None = None  # the state the heap was built at
        self.ties = 0

    def rebuild(self, state: State, who_of: Mapping[int, tuple[int, ...]]) -> None:
        heap: list[_RunEntry] = []
        for (shape, priority), by_reason in self.index.groups.items():
            cls = (shape, who_of[priority])
            for reason, run in by_reason.items():
                if self.start is None:
                    rest: Iterator[PendingWorkload] = iter(run)
                else:
                    rest = run.irange_key(self.start, inclusive=(self.inclusive, True))
                first = next(rest, None)
                if first is not None:
                    self.ties += 1
                    heap.append((queue_key(first), self.ties, first, rest, cls, reason))
        heapq.heapify(heap)
        self.heap = heap
        self.state = state

    def offer(self, entry: _RunEntry) -> PendingWorkload:
        """The heap's top is the next member to walk: everything before it is done."""
        self.start, self.inclusive = entry[0], True
        return entry[2]

    def advance(self, pw: PendingWorkload) -> None:
        self.start, self.inclusive = queue_key(pw), False
        heap = self.heap
        if heap and heap[0][2] is pw:
            _, _, _, rest, cls, reason = heap[0]
            following = next(rest, None)
            if following is None:
                heapq.heappop(heap)
            else:
                self.ties += 1
                heapq.heapreplace(heap, (queue_key(following), self.ties, following, rest, cls, reason))
        else:
            self.state = None  # not where the heap stands: rebuild it from `start` at the next look


@dataclass(slots=True)
class Queue:
    """One ClusterQueue in one call: where its walk stands, and what it did (Kueue's queue plus its entry's
    status)."""

    name: str
    cq: ClusterQueue
    node: Node
    seq: Sequence[PendingWorkload]  # walked by position: the whole queue, or only its sticky members with `runs`
    assigner: FlavorAssigner
    strict: bool
    index: PendingIndex | None = None
    runs: Runs | None = None  # the rest of the queue, when it can be walked by runs
    pos: int = 0
    done: bool = False
    headline_written: bool = False  # its first unfitting workload's reason is written (see `Nominator.no_fit`)
    reserved: bool = False  # its first NO_TARGETS workload was found (and holds, or had nothing to hold)
    hold: Hold | None = None  # what that workload reserves against other queues
    holder: bool = False  # StrictFIFO: its head holds for its pass and is offered again in the next (`Cycle.run`)
    rest_blocked: bool = False  # StrictFIFO: the rest's `BlockedByHead` (and the head's reason) written this call
    emitted: bool = False  # any event about this queue's pending workloads this cycle
    acted: bool = False  # offered an entry this cycle
    parked: bool = False  # its head was a borrower skipped in the last pass (`Processor.own_first`)
    volatile: bool = False  # some outcome depended on the instant (see `Outcome.volatile`): not memoised
    equivalent: dict[ClassKey, Outcome] = field(default_factory=dict)  # (state, shape, who) -> unfit outcome

    def peek(self, state: State, lone: bool) -> PendingWorkload | None:
        """The next workload the walk must look at: by position, then (with runs) the first member of a run that is
        not quiet. Skipped members are exactly those for which the walk would find NoFit and write nothing."""
        if self.pos < len(self.seq):
            return self.seq[self.pos]
        runs = self.runs
        if runs is None:
            return None
        if runs.state != state:
            runs.rebuild(state, {priority: who(self.cq, priority, 0) for _, priority in runs.index.groups})
        heap = runs.heap
        while heap:
            top = heap[0]
            if self.quiet(state, top[4], top[5], lone):
                heapq.heappop(heap)
                continue
            return runs.offer(top)
        return None

    def advance(self, pw: PendingWorkload) -> None:
        if self.pos < len(self.seq):
            self.pos += 1
        else:
            assert self.runs is not None
            self.runs.advance(pw)

    def quiet(self, state: State, cls: tuple[Shape, tuple[int, ...]], reason: Coarse | None, lone: bool) -> bool:
        """Would every member of this run be NoFit now and write nothing? Yes when the queue's headline is written,
        the run's class was evaluated in this state to NoFit (or NoTargets after the queue's reservation, or in a
        queue alone in its tree), and the run's coarse last reason is that result's: nothing is written then."""
        if reason is None or not self.headline_written:
            return False
        known = self.equivalent.get((state[0], state[1], cls[0], cls[1]))
        if known is None or (known.kind is Kind.NO_TARGETS and not self.reserved and not lone):
            return False
        return known.coarse() == reason


@dataclass(slots=True)
class Entry:
    """A queue's head offered in a pass, with what its assessment found."""

    queue: Queue
    pw: PendingWorkload
    result: Outcome

    def level(self) -> int:
        """How high in the tree it borrows (0: it does not)."""
        return self.result.assignment.borrowing if self.result.assignment is not None else 0

    def order(self) -> tuple[int, int, int, str, str]:
        return entry_order(self.level(), self.pw, self.queue.name)


def sticky_first(seq: Sequence[PendingWorkload]) -> Sequence[PendingWorkload]:
    """BestEffortFIFO's sticky preemptor (Kueue #6929): a workload waiting for its victims is offered first, so the
    room its preemptions free is not taken by its own queue's or a sibling's next workload."""
    sticky = [pw for pw in seq if is_sticky(pw)]
    if not sticky:
        return seq
    return [*sticky, *(pw for pw in seq if not is_sticky(pw))]
