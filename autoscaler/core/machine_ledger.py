"""The machines of a run: each one's lifecycle, slots, queue and runs (``Machine``), the
launches in flight, and the indexes a dispatch reads instead of every machine the run
has had (those alive and their slots, those with a queue, the launch order)."""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field

from autoscaler.core.billing import BillingModel
from autoscaler.core.errors import StateError
from autoscaler.core.model import MachineState, PricesSeen, TypeSpec
from autoscaler.core.spot_prices import PriceHistory

# Enum members looked up once: reading ``MachineState.READY`` calls a descriptor.
_GONE = MachineState.GONE
_READY = MachineState.READY


@dataclass(slots=True)
class Machine:
    id: str
    type: TypeSpec
    token: str
    launched_at: float
    paid_until: float  # end of the committed time; the machine is gone by then
    zone: str = ""  # where the provider put it (an EC2 zone), "" if it did not say
    state: MachineState = MachineState.BOOTING
    ready_at: float | None = None
    ended_at: float | None = None
    end_reason: str | None = None
    marked: bool = False  # to be released at the end of its paid time
    draining: bool = False  # takes no new work (a rebalance recommendation): stays marked
    running: dict[int, float] = field(default_factory=dict)  # task -> start time
    run_no: dict[int, int] = field(default_factory=dict)  # task -> which run on this machine
    starts: int = 0  # runs started here so far; numbers the next run
    queue: deque[int] = field(default_factory=deque)  # assigned, not yet started
    replicas: set[int] = field(default_factory=set)  # running copies of tasks run elsewhere
    taken: set[int] = field(default_factory=set)  # queued here, taken back: may still end here
    lost_runs: set[int] = field(default_factory=set)  # of ``taken``: counted runs its end cut
    tasks_done: int = 0
    busy_s: float = 0.0  # time spent on tasks that finished (any outcome)

    @property
    def alive(self) -> bool:
        return self.state is not _GONE

    @property
    def idle(self) -> bool:
        return self.state is _READY and not self.running and not self.queue


@dataclass
class QueueLengths:
    """The alive machines with a queue, by kind (type name and slots) and queue length,
    each length's in launch order: the longest queue of each kind and the first launched
    among equals, without a pass over every machine (the tail's take-back asks once per
    idle machine). A heap per kind and length; an entry whose machine's queue changed
    length since is dropped when it comes to the top, and a heap mostly of such entries
    is rebuilt. Kept only once asked (``Fleet.longest_queues``)."""

    kept: bool = False  # kept up to date (``Fleet.longest_queues``)
    lengths: dict[str, int] = field(default_factory=dict)  # machine -> its queue's length
    counts: dict[tuple[str, int], dict[int, int]] = field(default_factory=dict)
    heaps: dict[tuple[str, int], dict[int, list[tuple[int, str]]]] = field(default_factory=dict)

    def set(self, m: Machine, n: int, place: int) -> None:
        """``m`` (launched ``place``-th) has ``n`` tasks queued now (0: none, or gone)."""
        old = self.lengths.get(m.id, 0)
        if n == old:
            return
        kind = (m.type.name, m.type.slots)
        counts = self.counts.setdefault(kind, {})
        if old:
            left = counts[old] - 1
            if left:
                counts[old] = left
            else:
                del counts[old]
        if not n:
            del self.lengths[m.id]
            return
        self.lengths[m.id] = n
        counts[n] = counts.get(n, 0) + 1
        heap = self.heaps.setdefault(kind, {}).setdefault(n, [])
        heapq.heappush(heap, (place, m.id))
        if len(heap) > 2 * counts[n] + 8:
            live = {e for e in heap if self.lengths.get(e[1]) == n}
            heap[:] = sorted(live)

    def longest(self) -> Iterator[tuple[str, int]]:
        """Per kind, the machine with the longest queue (the first launched among
        equals) and that length."""
        lengths = self.lengths
        for kind, counts in self.counts.items():
            if not counts:
                continue
            n = max(counts)
            heap = self.heaps[kind][n]
            while lengths.get(heap[0][1]) != n:
                heapq.heappop(heap)
            yield heap[0][1], n


@dataclass
class Fleet:
    """Every machine the run has had and the launches it has in flight. ``types`` and
    ``billing`` are the run's (``RunState``), kept here for the questions asked of the
    machines (boot time, what they cost)."""

    types: dict[str, TypeSpec] = field(compare=False, repr=False)
    billing: BillingModel = field(compare=False, repr=False)
    machines: dict[str, Machine] = field(default_factory=dict)
    # Of them, those not gone (in launch order) and their slots: the per-event work of
    # a dispatch does not grow with the machines a long run has had.
    alive: dict[str, Machine] = field(default_factory=dict, compare=False, repr=False)
    alive_slots: int = field(default=0, compare=False)
    # Per pool (type, zone) of the alive ones: [how many, the sum of their launch
    # times], so their time alive is n·now − Σ launched (``pool_alive_s``) without a
    # pass over the machines at each reclaim or plan.
    pools: dict[tuple[str, str], list[float]] = field(
        default_factory=dict, compare=False, repr=False
    )
    # Of the alive ones, those with tasks queued (in no order; ``launch_index`` orders
    # them), and the longest queue of each kind, which the tail's take-back reads per
    # idle machine (``longest_queues``).
    queued: dict[str, Machine] = field(default_factory=dict, compare=False, repr=False)
    queue_lengths: QueueLengths = field(default_factory=QueueLengths, compare=False, repr=False)
    launch_index: dict[str, int] = field(default_factory=dict, compare=False, repr=False)
    readies: int = field(default=0, compare=False)  # machines that came up (MachineReady)
    # ``boot_s`` per type, with the (machines, readies) it was worked out at
    _boots: dict[str, tuple[tuple[int, int], float | None]] = field(
        default_factory=dict, compare=False, repr=False
    )
    pending_launches: dict[str, tuple[str, int]] = field(default_factory=dict)
    launch_seq: int = 0  # launches decided so far; names the next launch token
    launch_prefix: str = ""  # launch tokens (and so machine names) start with it
    market: PriceHistory = field(default_factory=PriceHistory)  # the spot prices seen

    def next_token(self) -> str:
        """The token of the next launch: ``L<n>``, after the run's prefix if it has one
        (machine names are made from it: unique across runs side by side)."""
        seq = f"L{self.launch_seq}"
        return f"{self.launch_prefix}_{seq}" if self.launch_prefix else seq

    def launch(self, token: str, type_name: str, count: int) -> None:
        """A launch of ``count`` machines was decided; they come as ``MachineLaunched``."""
        self.launch_seq += 1
        self.pending_launches[token] = (type_name, count)

    def settle(self, token: str, count: int) -> int:
        """``count`` machines of launch ``token`` will never come: how many of them were
        still in flight (the rest had come, or the launch is unknown)."""
        ttype, left = self.pending_launches.get(token, ("", 0))
        count = min(count, left)
        if left - count <= 0:
            self.pending_launches.pop(token, None)
        else:
            self.pending_launches[token] = (ttype, left - count)
        return count

    def launched(
        self, mid: str, type_name: str, token: str, start: float, zone: str = ""
    ) -> Machine:
        """A machine of launch ``token`` exists, paid from ``start`` for the first step."""
        ttype, count = self.pending_launches.get(token, (type_name, 0))
        if count <= 0 or ttype != type_name:
            raise StateError(f"machine {mid} launched for unknown token {token}")
        if count == 1:
            del self.pending_launches[token]
        else:
            self.pending_launches[token] = (ttype, count - 1)
        kind = self.types[type_name]
        m = Machine(
            id=mid,
            type=kind,
            token=token,
            launched_at=start,
            paid_until=start + self.billing.first_step_s,
            zone=zone,
        )
        self.machines[mid] = m
        self.alive[mid] = m
        self.launch_index[mid] = len(self.launch_index)
        self.alive_slots += kind.slots
        pool = self.pools.setdefault((kind.name, zone), [0.0, 0.0])  # as ``gone`` finds it
        pool[0] += 1
        pool[1] += start
        return m

    def ready(self, mid: str, now: float) -> Machine | None:
        """Machine ``mid`` came up at ``now``; None if it had gone already."""
        m = self.machines[mid]
        if not m.alive:
            return None
        m.state = _READY
        m.ready_at = now
        self.readies += 1
        return m

    def extend(self, mid: str, until: float) -> float:
        """Machine ``mid`` is paid until ``until``: the money that commits."""
        m = self.machines[mid]
        old = self.cost(m, m.paid_until)
        new = self.cost(m, until)
        m.paid_until = until
        return new - old

    def cost(self, m: Machine, until: float) -> float:
        """What ``m`` costs billed until ``until``: at its type's price, or, for a
        market-priced type, at the prices seen and its cap beyond them (``market``)."""
        t = m.type
        if t.cap is None:
            return self.billing.cost(t.price, until - m.launched_at)
        return self.market.cost(self.billing, t.name, t.cap, m.launched_at, until)

    def billed(self, m: Machine, end: float) -> float:
        """What ``m`` is billed for its life to ``end``: at its type's price, or at the
        market's prices in force, the last seen taken to hold since (a report's actual
        spend; ``cost`` is what is committed)."""
        t = m.type
        if t.cap is None:
            return self.billing.cost(t.price, end - m.launched_at)
        return self.market.cost(self.billing, t.name, t.cap, m.launched_at, end, holds=True)

    def reprice(self, now: float, event: PricesSeen) -> float:
        """Market prices seen at ``now``: the money to commit (0 or less) as the time of
        market-priced machines is priced by the market instead of by their caps."""
        known = self.market.known_until
        priced = [
            (m, end)
            for m in self.machines.values()
            if m.type.cap is not None
            for end in (m.ended_at if m.ended_at is not None else m.paid_until,)
            if known is None or end > known
        ]
        old = [self.cost(m, end) for m, end in priced]
        self.market.record(now, event.types, event.at, event.prices, event.source)
        new = [self.cost(m, end) for m, end in priced]
        return sum(new) - sum(old)

    def mark(self, mid: str, release: bool) -> None:
        self.machines[mid].marked = release

    def gone(self, m: Machine, end: float, reason: str) -> float:
        """``m`` (its runs ended) is gone at ``end``: the money committed beyond its end
        that is not spent (0 or less, to commit)."""
        m.queue.clear()
        m.state = _GONE
        self.track_queue(m)
        if self.alive.pop(m.id, None) is not None:
            self.alive_slots -= m.type.slots
            pool = self.pools[m.type.name, m.zone]
            pool[0] -= 1
            pool[1] -= m.launched_at
            if pool[0] <= 0:
                del self.pools[m.type.name, m.zone]
        m.ended_at = end
        m.end_reason = reason
        spent = self.cost(m, end)
        committed = self.cost(m, m.paid_until)
        return min(0.0, spent - committed)

    def track_queue(self, m: Machine) -> None:
        """Keep ``queued`` (the alive machines with a queue), and ``queue_lengths`` once
        it is kept, after ``m``'s queue changed."""
        n = len(m.queue) if m.alive else 0
        if n:
            self.queued[m.id] = m
        else:
            self.queued.pop(m.id, None)
        if self.queue_lengths.kept:
            self.queue_lengths.set(m, n, self.launch_index[m.id])

    def longest_queues(self) -> Iterator[tuple[str, int]]:
        """Per kind of machine (type and slots), the one with the longest queue, the first
        launched among equals, and that length (``QueueLengths``: kept from the first
        time it is asked, the tail, on; the queues of the rest of the run change at
        every task and nothing asks)."""
        index = self.queue_lengths
        if not index.kept:
            index.kept = True
            for m in self.queued.values():
                index.set(m, len(m.queue), self.launch_index[m.id])
        return index.longest()

    def first_cost(self, type_name: str) -> float:
        """What one machine of ``type_name`` commits when launched: its first step."""
        return self.billing.cost(self.types[type_name].commit_price, self.billing.first_step_s)

    def alive_machines(self) -> Iterator[Machine]:
        return iter([m for m in self.alive.values() if m.state is not _GONE])

    def pool_alive_s(self, now: float) -> dict[tuple[str, str], float]:
        """Per pool (type, zone), the time its machines alive at ``now`` have lived."""
        return {pool: max(0.0, n * now - launched) for pool, (n, launched) in self.pools.items()}

    def any_alive(self) -> bool:
        return bool(self.alive)

    def boot_s(self, type_name: str) -> float:
        """β of a type: launch to ready (its set-up included), the mean over its machines
        that came up; the declared ``boot_s`` until one has."""
        key = (len(self.machines), self.readies)  # what the mean is over: kept until it moves
        kept = self._boots.get(type_name)
        if kept is None or kept[0] != key:
            seen = [
                m.ready_at - m.launched_at
                for m in self.machines.values()
                if m.type.name == type_name and m.ready_at is not None
            ]
            kept = (key, sum(seen) / len(seen) if seen else None)
            self._boots[type_name] = kept
        return self.types[type_name].boot_s if kept[1] is None else kept[1]

    def alive_counts(self, *, include_marked: bool = True) -> dict[str, int]:
        """``count_alive`` of every type, in one pass over the machines alive."""
        counts = dict.fromkeys(self.types, 0)
        for m in self.alive_machines():
            if include_marked or not m.marked:
                counts[m.type.name] = counts.get(m.type.name, 0) + 1
        for t, c in self.pending_launches.values():
            counts[t] = counts.get(t, 0) + c
        return counts

    def count_alive(self, type_name: str, *, include_marked: bool = True) -> int:
        return sum(
            1
            for m in self.alive_machines()
            if m.type.name == type_name and (include_marked or not m.marked)
        ) + sum(c for t, c in self.pending_launches.values() if t == type_name)

    def actual_cost(self, now: float) -> float:
        """What the machines cost by their real lifetimes up to ``now`` (≤ committed)."""
        total = 0.0
        for m in self.machines.values():
            end = m.ended_at if m.ended_at is not None else now
            total += self.cost(m, end)
        return total

    def by_provider(self) -> dict[str, tuple[int, float]]:
        """Provider name -> (machines alive, money committed to its machines so far)."""
        out: dict[str, tuple[int, float]] = {}
        for m in self.machines.values():
            alive, money = out.get(m.type.provider, (0, 0.0))
            paid = self.cost(m, m.paid_until)
            out[m.type.provider] = (alive + (m.ended_at is None), money + paid)
        return out
