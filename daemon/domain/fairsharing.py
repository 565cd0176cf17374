"""Fair sharing: weighted dominant resource shares (DRS) and the admission tournament.

Ports of Kueue's `fair_sharing.go` and `fair_sharing_iterator.go`. Shares are exact Fractions. Fair-sharing
preemption (targets over the branches of the cohort tree, the strategies) is in `fairpreemption.py`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import TypeVar

from daemon.domain.model import FlavorResource
from daemon.domain.quota import (
    Node,
    add_usage,
    post_order,
    potential_available,
    remove_usage,
)


@dataclass(frozen=True, slots=True)
class DRS:
    """A node's dominant resource share. `key` orders shares: lower is fairer to serve, higher fairer to preempt."""

    key: tuple[int, Fraction]  # (1, ratio) when a zero-weight node borrows (an infinite share), else (0, ratio/weight)
    borrowed: frozenset[FlavorResource]

    @property
    def borrowing(self) -> bool:
        return bool(self.borrowed)


ZERO = DRS((0, Fraction(0)), frozenset())


def dominant_resource_share(node: Node, extra: Mapping[FlavorResource, int] | None = None) -> DRS:
    if node.parent is None:
        return ZERO
    extra = extra or {}
    by_resource: dict[str, int] = {}
    borrowed: set[FlavorResource] = set()
    for fr in sorted(set(node.subtree) | set(extra)):
        over = node.usage.get(fr, 0) + extra.get(fr, 0) - node.subtree.get(fr, 0)
        if over > 0:
            by_resource[fr[1]] = by_resource.get(fr[1], 0) + over
            borrowed.add(fr)
    if not by_resource:
        return ZERO
    root = node.root()
    lendable: dict[str, int] = {}
    for fr in root.subtree:
        lendable[fr[1]] = lendable.get(fr[1], 0) + potential_available(node.parent, fr)
    ratio = Fraction(0)
    for res in sorted(by_resource):
        if lendable.get(res, 0) > 0:
            ratio = max(ratio, Fraction(by_resource[res] * 1000, lendable[res]))
    if node.weight == 0:
        return DRS((1, ratio) if ratio else (0, Fraction(0)), frozenset(borrowed))
    return DRS((0, ratio * 1000 / node.weight), frozenset(borrowed))


E = TypeVar("E")


def tournament(
    root: Node,
    cqs: Mapping[str, Node],
    entries: Mapping[str, E],
    usage_of: Callable[[E], Mapping[FlavorResource, int]],
    tie_break: Callable[[E], tuple[object, ...]],
    is_preemptor: Callable[[E], bool] | None = None,
) -> E | None:
    """The next entry of a tree (`entries` by ClusterQueue name): at each cohort, the child whose nominee leaves it
    with the lowest share wins; a preemptor waiting for its victims first (`is_preemptor`, Kueue's
    PrioritizePreemptorWorkloads), then not borrowing on the nominee's flavors, then share, then `tie_break`."""
    shares: dict[tuple[str, str], DRS] = {}
    for cq_name, e in entries.items():
        node = cqs[cq_name]
        usage = usage_of(e)
        for fr, v in usage.items():
            add_usage(node, fr, v)
        share = dominant_resource_share(node)
        for ancestor in node.path_to_root():
            shares[(ancestor.name, cq_name)] = share
            share = dominant_resource_share(ancestor)
        for fr, v in usage.items():
            remove_usage(node, fr, v)

    # Each cohort's nominee from its children's, children first; a loop, so a deep chain cannot overflow the stack.
    won_at: dict[str, tuple[str, E]] = {}
    for cohort in post_order(root):
        nominees = [won_at[c.name] for c in cohort.child_cohorts if c.name in won_at]
        nominees.extend((c.name, entries[c.name]) for c in cohort.child_cqs if c.name in entries)
        if not nominees:
            continue

        def key(item: tuple[str, E], cohort: Node = cohort) -> tuple[object, ...]:
            drs = shares.get((cohort.name, item[0]), ZERO)
            requested = set(usage_of(item[1]))
            first = is_preemptor is None or is_preemptor(item[1])
            return (not first, bool(drs.borrowed & requested), drs.key, tie_break(item[1]))

        won_at[cohort.name] = min(nominees, key=key)
    won = won_at.get(root.name)
    return None if won is None else won[1]
