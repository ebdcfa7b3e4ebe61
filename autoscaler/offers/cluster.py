"""An emulated cluster for paper 003: processors, its own local jobs, and an
Earliest-Deadline-First queue that reschedules the jobs not yet started whenever a new
one is considered (§3: the free time slots depend on the job submitted).

Every job is held to a deadline. A new job goes to its place by deadline in the queue and
the queue is replanned from there (each job at its earliest fit, in deadline order, around
the jobs already running); it is admitted with its deadline when that breaks no held
deadline, its own included. Otherwise a binary search over later places in the queue
(the paper's FEEDBACK, after Islam et al.) finds the first where nothing held breaks, and
the job is held to when it then ends: its new deadline D^N. The last place always works,
so every job is admitted. Runtimes are exact, so plans hold until the next job comes.

An offer for n tasks of a bag (§3.1) is that admission tried with a temporary job, for
each slice, merged where the finish is the same. The cluster reveals offers only; its
free time slots (for FreeTimeSlots), its processors (for DPLB) and its load to be
processed (for DPLBV2) are separate calls. Event-driven: nothing happens between calls;
``advance(now)`` starts what was planned to start by then.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

from autoscaler.offers.profile import Profile, Slots, Wave, free_processors
from autoscaler.providers.offer import Offer, OfferRequest


@dataclass(frozen=True, slots=True)
class Job:
    """A local job (``procs`` processors at once for ``runtime``) or a bag's part
    (``procs`` independent one-processor tasks of ``runtime`` each, when ``tasks``)."""

    name: str
    procs: int
    runtime: float
    submit: float
    deadline: float
    tasks: bool = False

    @property
    def work(self) -> float:
        """Processor-seconds."""
        return self.procs * self.runtime


@dataclass(frozen=True, slots=True)
class Admission:
    """``job`` admitted, held to ``deadline`` (its own, or the later D^N), planned (when
    it was admitted) to start at ``start``."""

    job: Job
    deadline: float
    start: float

    @property
    def delayed(self) -> bool:
        return self.deadline > self.job.deadline


@dataclass(frozen=True, slots=True)
class _Queued:
    key: float  # its place in the queue (at least its held deadline)
    seq: int
    job: Job
    deadline: float  # what it is held to


@dataclass(frozen=True, slots=True)
class _Trial:
    place: int  # where in the queue the job went
    ok: bool  # nothing held breaks, the job's own deadline aside
    end: float  # when the job would end
    plans: dict[int, list[Wave]]  # seq -> waves, for the job (seq -1) and those after it


class Cluster:
    """One cluster's scheduler (mutable: the emulator's state of that cluster)."""

    def __init__(self, name: str, processors: int) -> None:
        self.name = name
        self.processors = processors
        self._queue: list[_Queued] = []  # not started, by (key, seq)
        self._plans: dict[int, list[Wave]] = {}
        self._running: list[Wave] = []
        self._started: list[tuple[Job, list[Wave]]] = []
        self._seq = 0
        self._now = -math.inf
        self._snapshots: list[Profile] | None = None

    # -- time --------------------------------------------------------------------------

    def advance(self, now: float) -> None:
        """Start the queued jobs planned to start by ``now``; forget what ended."""
        if now < self._now or (now == self._now and not self._due(now)):
            return
        self._now = now
        self._snapshots = None
        keep: list[_Queued] = []
        for queued in self._queue:
            waves = self._plans[queued.seq]
            if waves[0].start <= now:
                del self._plans[queued.seq]
                self._running += waves
                self._started.append((queued.job, waves))
            else:
                keep.append(queued)
        self._queue = keep
        self._running = [w for w in self._running if w.end > now]

    def _due(self, now: float) -> bool:
        return any(self._plans[q.seq][0].start <= now for q in self._queue)

    def started(self) -> list[tuple[Job, list[Wave]]]:
        """Every job started so far with its waves (call ``advance(math.inf)`` to start
        all)."""
        return list(self._started)

    # -- what the cluster publishes ----------------------------------------------------

    def offers(
        self,
        request: OfferRequest,
        sizes: Sequence[int],
        *,
        power: bool = False,
        load: bool = False,
    ) -> list[Offer]:
        """Offers for ``sizes`` of the bag (§3.1): each size tried as a temporary job; a
        size whose finish equals the next smaller one's grows that offer. Sizes are tried
        largest first, down to the first that meets the deadline: every smaller one meets
        it too, so it would grow into that one."""
        found: list[Offer] = []
        for size in sorted(sizes, reverse=True):
            job = Job("offer", size, request.task_s, request.now, request.deadline, tasks=True)
            finish = self.finish(job, request.now)
            found.append(
                Offer(
                    self.name,
                    size,
                    finish,
                    power=self.processors if power else 0,
                    load=self.load() if load else 0.0,
                )
            )
            if finish <= request.deadline:
                break  # the smaller sizes meet it too: merged into this one
        offers: list[Offer] = []
        for offer in reversed(found):
            if offers and offers[-1].finish == offer.finish:
                offers[-1] = offer
            else:
                offers.append(offer)
        return offers

    def finish(self, job: Job, now: float) -> float:
        """When ``job``, submitted at ``now``, would be held to end (its deadline, or D^N
        when that breaks a held one), without admitting it: the finish an offer of it
        promises."""
        self.advance(now)
        return self._held(job, self._admit_trial(job))

    def free_slots(self, now: float) -> Slots:
        """The free processors over time once everything queued is placed (§3.2)."""
        self.advance(now)
        return self._prefix()[-1].slots()

    def load(self) -> float:
        """Work still to be processed, processor-seconds (running and queued)."""
        running = sum(w.count * (w.end - max(w.start, self._now)) for w in self._running)
        return running + sum(q.job.work for q in self._queue)

    def cancel(self, job: Job, now: float) -> None:
        """``job`` ends at ``now`` (its owner cancelled it): queued, it leaves the queue;
        running, its processors are free from ``now``. The queued jobs then move to their
        earliest start, each with the others' plans kept (conservative backfilling's
        compression): none starts later than planned."""
        self.advance(now)
        for i, queued in enumerate(self._queue):
            if queued.job is job:
                del self._queue[i]
                del self._plans[queued.seq]
                self._compress()
                return
        for i, (started, waves) in enumerate(self._started):
            if started is job:
                self._running = [w for w in self._running if not any(w is x for x in waves)]
                cut = [replace(w, length=max(0.0, min(w.end, now) - w.start)) for w in waves]
                self._started[i] = (started, cut)
                self._compress()
                return

    def _compress(self) -> None:
        for queued in self._queue:
            profile = free_processors(self._running, self.processors, self._now)
            for other in self._queue:
                if other is not queued:
                    for wave in self._plans[other.seq]:
                        profile.take(wave)
            self._plans[queued.seq] = self._place(profile, queued.job)
        self._snapshots = None

    # -- admission ---------------------------------------------------------------------

    def admit(self, job: Job, now: float) -> Admission:
        """Queue ``job``, held to its deadline or, when that breaks a held one, to D^N."""
        self.advance(now)
        trial = self._admit_trial(job)
        held = self._held(job, trial)
        lower = self._queue[trial.place - 1].key if trial.place else -math.inf
        queued = _Queued(max(held, lower), self._seq, job, held)
        self._seq += 1
        self._queue.insert(trial.place, queued)
        for seq, waves in trial.plans.items():
            self._plans[queued.seq if seq == -1 else seq] = waves
        self._snapshots = None
        return Admission(job, held, trial.plans[-1][0].start)

    @staticmethod
    def _held(job: Job, trial: _Trial) -> float:
        return max(job.deadline, trial.end)

    def _admit_trial(self, job: Job) -> _Trial:
        """The first place from the job's own (by deadline) where nothing held breaks
        and the job ends before the next job's deadline (binary search)."""
        first = bisect.bisect_right([q.key for q in self._queue], job.deadline)
        trial = self._try(job, first)
        if trial.ok and trial.end <= self._upper(first):
            return trial
        lo, hi = first, len(self._queue)
        best = self._try(job, hi)
        while hi - lo > 1:
            mid = (lo + hi) // 2
            attempt = self._try(job, mid)
            if attempt.ok and attempt.end <= self._upper(mid):
                hi, best = mid, attempt
            else:
                lo = mid
        return best

    def _upper(self, place: int) -> float:
        return self._queue[place].key if place < len(self._queue) else math.inf

    def _try(self, job: Job, place: int) -> _Trial:
        """The job placed at ``place`` in the queue and the jobs after it replanned; one
        that ends where the profile has not changed yet keeps its plan."""
        profile = self._prefix()[place].copy()
        plans = {-1: self._place(profile, job)}
        end = plans[-1][-1].end
        changed = plans[-1][0].start  # the profile is as planned before this
        for queued in self._queue[place:]:
            old = self._plans[queued.seq]
            if old[-1].end <= changed:
                for wave in old:
                    profile.take(wave)
                plans[queued.seq] = old
                continue
            waves = self._place(profile, queued.job)
            if waves[-1].end > queued.deadline:
                return _Trial(place, False, end, {})
            plans[queued.seq] = waves
            changed = min(changed, waves[0].start, old[0].start)
        return _Trial(place, True, end, plans)

    def _place(self, profile: Profile, job: Job) -> list[Wave]:
        if job.tasks:
            return profile.place_tasks(job.procs, job.runtime, self._now)
        return profile.place_rigid(min(job.procs, self.processors), job.runtime, self._now)

    def _prefix(self) -> list[Profile]:
        """The profile before each queued job is placed, and after all (cached until the
        queue or the time changes)."""
        if self._snapshots is None:
            profile = free_processors(self._running, self.processors, self._now)
            snapshots = []
            for queued in self._queue:
                snapshots.append(profile.copy())
                waves = self._plans[queued.seq]
                for wave in waves:
                    profile.take(wave)
            snapshots.append(profile)
            self._snapshots = snapshots
        return self._snapshots
