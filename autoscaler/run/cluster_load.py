"""A dry run's cluster providers with their users' load (``emulator.local_load``): the
offers they make when a run starts, and the wait of their machines in the queue.

Both come from the users' jobs of ``offers.local_load.Users``, drawn from one seed per
provider, so the offers a job is split by and the machines that then run its part meet
the same users. A machine is a job of its slots for a paid unit (what a Slurm or Grid
Engine machine asks for), admitted when launched; it waits until that job's planned
start, and leaves the queue when it ends (``scancel``, ``qdel``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from autoscaler.config.schema import LocalLoad, MachineType, RunConfig
from autoscaler.offers.cluster import Job
from autoscaler.offers.local_load import Users
from autoscaler.providers.offer import Offer, OfferRequest
from autoscaler.providers.slurm_output import finish_after


def users_seed(cfg: RunConfig, name: str) -> str:
    """The seed of provider ``name``'s users' jobs."""
    return f"{cfg.emulator.seed}:local_load:{name}"


class LoadedCluster:
    """A loaded cluster provider's offers, as its scheduler's (``sbatch --test-only``)
    are, from the emulated queue.

    For each size, per type the job names: as many machines as the size fills (within
    the type's and the provider's limits), one rigid job of their slots for their boot
    and the waves the tasks take on them, held by the queue to when it would end (the
    part's deadline, or the later D^N). The earliest over the types is the offer."""

    def __init__(
        self,
        cfg: RunConfig,
        name: str,
        load: LocalLoad,
        limit: int | None,
        types: Sequence[MachineType],
    ) -> None:
        self.name = name
        self.load = load
        self.seed = users_seed(cfg, name)
        self.types = types
        self.limit = limit

    def offers(self, request: OfferRequest, sizes: Sequence[int]) -> list[Offer]:
        users = Users(self.name, self.load, self.seed)
        out = []
        for n in sizes:
            finishes = []
            for t in self.types:
                slots = t.slots or 1
                count = t.max_count if self.limit is None else min(t.max_count, self.limit)
                width = min(math.ceil(n / slots), count)
                runtime = t.boot_s + finish_after(n, width * slots, request.task_s)
                job = Job("offer", width * slots, runtime, request.now, request.deadline)
                finishes.append(users.finish(job, request.now))
            out.append(Offer(self.name, n, min(finishes)))
        return out


class ClusterQueues:
    """The queues of a dry run's loaded cluster providers (``providers.sim.Queues``)."""

    def __init__(self, cfg: RunConfig, atu_s: float) -> None:
        self._users = {
            name: Users(name, load, users_seed(cfg, name))
            for name, load in cfg.emulator.local_load.items()
        }
        self._provider = {t.name: cfg.provider_of(t.name) for t in cfg.machine_types}
        self._slots = {t.name: t.slots or 1 for t in cfg.machine_types}
        self._atu_s = atu_s
        self._jobs: dict[str, tuple[Users, Job]] = {}

    def wait(self, machine: str, type: str, now: float) -> float:
        users = self._users.get(self._provider[type])
        if users is None:
            return 0.0
        job = Job(machine, self._slots[type], self._atu_s, now, now + self._atu_s)
        self._jobs[machine] = (users, job)
        return max(0.0, users.start(job, now) - now)

    def leave(self, machine: str, now: float) -> None:
        held = self._jobs.pop(machine, None)
        if held is not None:
            users, job = held
            users.leave(job, now)
