"""Choice of a network domain for a group of instances: the rule, the candidates, the score.

The rule of the reference topology-aware scheduler: a consolidated group of
2 nodes shares a leaf; 4 nodes fill one leaf; 8 nodes take two adjacent leaves; 16
nodes four adjacent leaves; sizes in between round up. With ``hosts_per_leaf`` nodes
a leaf (4 in the reference), the group needs ``ceil(size / hosts_per_leaf)`` leaves,
rounded up to a power of two; a ``gpus_per_leaf`` limit (0: none) may need more.

Candidate domains are connected sets of that many adjacent leaves (grown from each
leaf towards the adjacent leaf with the most room). Each is scored, weights
configurable (the reference's 0.4 / 0.3 / 0.2 / 0.1):

- resource availability: room for the group's remaining members, ``min(1, slots /
  remaining)``, where a host's slots are how many more such instances fit its
  Placement inventories (and free GPUs), in-flight reservations included;
- topology alignment: the share of the group's members already placed that sit in
  the domain, averaged with whether the domain is the ``preferred_domain``;
- domain utilization: the used share of the domain's capacity of the requested
  resource classes (fuller first, so that empty domains stay whole);
- history: the share of the domain's hosts without recent build failures.

Domains that hold the whole group come first (then score, then the fewest spare slots:
the smallest domain that fits); only when no domain of the rule's size does, larger
ones (twice the leaves, ...) are tried, so groups never fragment a domain needlessly.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

SCORE_WEIGHTS = {"availability": 0.4, "alignment": 0.3, "utilization": 0.2, "history": 0.1}


@dataclass(frozen=True)
class GroupPlan:
    """The domain chosen for a request's group and what it was chosen from.

    ``domain``: the chosen leaves (empty: no topology or no leaf passes);
    ``rule_leaves``: leaves the rule asks for; ``members``: placed members per leaf;
    ``leaf_cap``: most members per leaf under ``distributed``; ``detail``: one line
    for the decision record.
    """

    strategy: str
    hard: bool
    domain: frozenset[str]
    rule_leaves: int
    members: Mapping[str, int] = field(default_factory=dict)
    eligible: frozenset[str] = frozenset()
    leaf_cap: int = 0
    detail: str = ""
    network: Any = None

    def leaf_of(self, host: str) -> str | None:
        """The leaf of ``host`` in the plan's network topology."""
        return self.network.leaf_of(host) if self.network is not None else None


def leaves_needed(size: int, hosts_per_leaf: int = 4, gpus_per_member: int = 0,
                  gpus_per_leaf: int = 0) -> int:
    """Leaves a consolidated group of ``size`` needs by the rule (a power of two, >= 1)."""
    count = math.ceil(size / max(1, hosts_per_leaf))
    if gpus_per_leaf and gpus_per_member:
        count = max(count, math.ceil(size * gpus_per_member / gpus_per_leaf))
    return 1 << (max(1, count) - 1).bit_length()


def host_slots(state: Any, request: Any) -> int:
    """How many more instances like ``request`` fit ``state`` (Placement's rule; free GPUs)."""
    if not (state.enabled and state.up):
        return 0
    best = 0
    for node in state.all_nodes:
        fits = 10**6
        for rc, amount in request.resources.items():
            inventory = node.inventories.get(rc)
            if inventory is None or amount <= 0:
                fits = 0 if inventory is None else fits
                continue
            fits = min(fits, max(0, math.floor(inventory.free / amount)))
        best = max(best, fits)
    gpus = request.gpu_count
    if gpus and state.topology is not None and state.topology.gpus:
        best = min(best, len(state.topology.free_gpus) // gpus)
    return best if best < 10**6 else 1


def used_share(state: Any, request: Any) -> float:
    """Used share (0..1) of the host's capacity of the request's resource classes."""
    shares = []
    for node in state.all_nodes:
        for rc in request.resources:
            inventory = node.inventories.get(rc)
            if inventory is not None and inventory.capacity > 0:
                shares.append(min(1.0, max(0.0, inventory.used / inventory.capacity)))
    return sum(shares) / len(shares) if shares else 0.0


def placed_members(request: Any, view: Any) -> dict[str, int]:
    """Members of the request's group already placed or promised, per host.

    From the in-flight reservations of the group (other instances than this one), the
    server group's ``hosts`` and the hosts' instances that are server group members.
    """
    group_id = request.network.group_id
    counts: dict[str, int] = {}
    own = request.instance_uuid
    for reservation in view.reservations:
        if group_id and reservation.group_id == group_id and (
                own is None or reservation.instance_uuid != own):
            counts[reservation.host] = counts.get(reservation.host, 0) + 1
    group = request.server_group
    if group is not None:
        members = set(group.members) - {own}
        for host in group.hosts:
            state = view.hosts.get(host)
            on_host = sum(1 for i in state.instances if i.uuid in members) if state else 0
            counts[host] = max(counts.get(host, 0), on_host, 1)
    return counts


def _grow(seed: str, k: int, leaves: Mapping[str, Any], room: Mapping[str, int]
          ) -> frozenset[str]:
    """A connected set of up to ``k`` leaves from ``seed``, adding the roomiest neighbour."""
    chosen = {seed}
    while len(chosen) < k:
        frontier = {n for leaf in chosen for n in leaves[leaf].adjacent
                    if n in leaves and n not in chosen}
        if not frontier:
            break
        chosen.add(min(frontier, key=lambda n: (-room.get(n, 0), n)))
    return frozenset(chosen)


def candidate_domains(leaves: Mapping[str, Any], k: int, room: Mapping[str, int]
                      ) -> set[frozenset[str]]:
    """Distinct connected domains of ``k`` leaves (fewer where the fabric has no more)."""
    return {_grow(seed, k, leaves, room) for seed in leaves}


def _matches(domain: Iterable[str], preferred: str, network: Any) -> bool:
    """Whether ``preferred`` names a leaf of the domain, or its spine or block."""
    for leaf in domain:
        info = network.leaves[leaf]
        blocks = {network.locations[h].block for h in info.hosts if h in network.locations}
        if preferred in {leaf, info.spine} | blocks:
            return True
    return False


@dataclass(frozen=True)
class DomainScore:
    """A candidate domain's score terms (0..1 each), its slots and the weighted total."""

    leaves: frozenset[str]
    slots: int
    fits: bool
    total: float
    terms: Mapping[str, float]


def score_domain(leaves: frozenset[str], hosts_by_leaf: Mapping[str, list[Any]],
                 slots: Mapping[str, int], members: Mapping[str, int], remaining: int,
                 request: Any, network: Any, weights: Mapping[str, float]) -> DomainScore:
    """Score one domain by the module docstring's four terms and ``weights``."""
    states = [s for leaf in leaves for s in hosts_by_leaf.get(leaf, ())]
    room = sum(slots.get(s.host, 0) for s in states)
    placed = sum(members.values())
    inside = sum(n for host, n in members.items() if network.leaf_of(host) in leaves)
    alignment = [inside / placed] if placed else []
    if request.network.preferred_domain:
        alignment.append(float(_matches(leaves, request.network.preferred_domain, network)))
    terms = {
        "availability": min(1.0, room / remaining) if remaining > 0 else 1.0,
        "alignment": sum(alignment) / len(alignment) if alignment else 1.0,
        "utilization": (sum(used_share(s, request) for s in states) / len(states)
                        if states else 0.0),
        "history": (sum(1 for s in states if not s.failed_builds) / len(states)
                    if states else 0.0),
    }
    total = sum(weights.get(name, 0.0) * value for name, value in terms.items())
    return DomainScore(leaves, room, room >= remaining, total, terms)


def choose_domain(request: Any, view: Any, eligible: frozenset[str], k: int,
                  members: Mapping[str, int], weights: Mapping[str, float]
                  ) -> tuple[DomainScore | None, int]:
    """The best domain of ``k`` leaves among ``eligible`` (larger if none fits), and its size.

    Returns ``(None, k)`` when no leaf is eligible.
    """
    network = view.network
    leaves = {name: network.leaves[name] for name in eligible}
    hosts_by_leaf: dict[str, list[Any]] = {}
    slots: dict[str, int] = {}
    for candidate in request.candidates:
        state = view.hosts.get(candidate.host)
        leaf = network.leaf_of(candidate.host)
        if state is None or leaf not in leaves:
            continue
        hosts_by_leaf.setdefault(leaf, []).append(state)
        slots[candidate.host] = host_slots(state, request)
    room = {leaf: sum(slots[s.host] for s in states) for leaf, states in hosts_by_leaf.items()}
    remaining = max(1, request.network.group_size - sum(members.values()))
    best, size = None, k
    while leaves:
        scored = [score_domain(d, hosts_by_leaf, slots, members, remaining, request, network,
                               weights) for d in candidate_domains(leaves, size, room)]
        best = min(scored, key=lambda s: (not s.fits, -s.total, s.slots, sorted(s.leaves)))
        if best.fits or size >= len(leaves):
            return best, size
        size *= 2
    return best, size


def _eligible(view: Any, minimum: float | None) -> frozenset[str]:
    """Leaves whose uplink (the leaf's, else its spine's) meets ``minimum`` Gbit/s."""
    network = view.network
    if minimum is None:
        return frozenset(network.leaves)
    found = set()
    for name, leaf in network.leaves.items():
        uplink = leaf.uplink_gbps or network.spines.get(leaf.spine or "")
        if uplink is not None and uplink >= minimum:
            found.add(name)
    return frozenset(found)


def plan_group(request: Any, view: Any, options: Any) -> GroupPlan | None:
    """The GroupPlan for ``request`` under a network plugin's ``options``; None without topology.

    ``options`` has ``strategy``, ``hard``, ``hosts_per_leaf``, ``gpus_per_leaf`` and
    ``score_weights``. A latency-sensitive request is consolidated unless it asks
    otherwise, and its domain is a hard constraint.
    """
    network = view.network
    if not network.leaves:
        return None
    wish = request.network
    strategy = wish.strategy or ("consolidated" if wish.latency_sensitive else options.strategy)
    hard = options.hard or wish.latency_sensitive
    eligible = _eligible(view, wish.min_uplink_gbps)
    members = placed_members(request, view)
    rule = leaves_needed(wish.group_size, options.hosts_per_leaf, request.gpu_count,
                         options.gpus_per_leaf)
    by_leaf: dict[str, int] = {}
    for host, count in members.items():
        leaf = network.leaf_of(host)
        if leaf:
            by_leaf[leaf] = by_leaf.get(leaf, 0) + count
    group = f"group {wish.group_id or '(single instance)'} of {wish.group_size}"
    if strategy == "distributed":
        used = {network.leaf_of(c.host) for c in request.candidates} & eligible
        cap = math.ceil(wish.group_size / max(1, len(used)))
        return GroupPlan(strategy, hard, eligible, rule, by_leaf, eligible, cap,
                         f"{group}, distributed: at most {cap} per leaf over {len(used)} leaves",
                         network)
    weights = dict(SCORE_WEIGHTS) | dict(options.score_weights)
    best, size = choose_domain(request, view, eligible, rule, members, weights)
    if best is None:
        return GroupPlan(strategy, hard, frozenset(), rule, by_leaf, eligible,
                         detail=f"{group}: no leaf meets the request", network=network)
    terms = ", ".join(f"{k} {v:.2f}" for k, v in best.terms.items())
    note = "" if size == rule else f" (rule: {rule}; none of that size fits)"
    return GroupPlan(strategy, hard, best.leaves, rule, by_leaf, eligible, detail=(
        f"{group}, {strategy}: leaves {'+'.join(sorted(best.leaves))} ({size} leaves{note}; "
        f"room {best.slots}, score {best.total:.2f}: {terms})"), network=network)
