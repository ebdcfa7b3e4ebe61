"""The machine lifecycle on the provider's side: launch, boot, watch, terminate, kill.

Provider and SSH calls block (an API call, a qsub, minutes of waiting for SSH to
answer), so they run on worker threads, never on the daemon's main loop: launches,
describes and terminates on the provider's threads; bootstraps on their own, so that
launches never queue behind them. What the threads learn comes back on the daemon's
queue as records (``LaunchDone``, ``BootFailed``, ``Ended``; ``Wake`` after each call),
and the main loop turns those into events.

Nothing here decides: the controller chose what to launch and what to release.
"""

from __future__ import annotations

import concurrent.futures
import queue
import threading
import time
from collections.abc import Callable, Container, Mapping
from dataclasses import KW_ONLY, dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from apscheduler.schedulers.base import BaseScheduler
from tenacity import (
    RetryCallState,
    Retrying,
    retry_if_result,
    stop_after_attempt,
    stop_after_delay,
    wait_exponential,
)

from autoscaler.config.schema import RunConfig
from autoscaler.core.errors import AutoscalerError
from autoscaler.core.model import Event, Launch, MachineLaunched
from autoscaler.core.state import RunState
from autoscaler.providers.base import (
    MachineRecord,
    MachineStatus,
    PartialLaunch,
    Provider,
    ProviderState,
)
from autoscaler.run.agents import describe_s
from autoscaler.run.refusals import holds, refusal

if TYPE_CHECKING:
    from autoscaler.providers.kind import Bootstrapper

TERMINATE_TRIES = 8
"""How often a refused terminate is tried (with backoff) before it is left to the end."""


@dataclass(frozen=True, slots=True)
class LaunchDone:
    """What a launch gave: the machines started, or why not."""

    launch: Launch
    records: tuple[MachineRecord, ...]
    error: str | None
    code: str | None = None  # the provider's error code, if it refused
    retryable: bool = False  # the refusal may pass by itself (throttling)
    siblings: tuple[str, ...] = ()  # the types of the provider that refused (its limit's)


@dataclass(frozen=True, slots=True)
class BootFailed:
    """A machine's agent could not be started (SSH never answered, a host key mismatch)."""

    machine: str
    reason: str


@dataclass(frozen=True, slots=True)
class Ended:
    """The provider says these machines are gone (from a describe on a provider thread);
    ``reasons``: why, for those it can tell (``MachineStatus.reason``)."""

    machines: frozenset[str]
    reasons: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Wake:
    """A provider call returned; makes the loop look at its exit condition."""


def launch_events(
    done: LaunchDone, state: RunState, cfg: RunConfig, now: float, log: Any
) -> list[Event]:
    """What a launch's result tells the controller: the machines it started, and a
    ``LaunchFailed`` for those it did not, with how long to avoid what refused."""
    launch = done.launch
    if launch.token not in state.fleet.pending_launches:
        return []
    events: list[Event] = []
    for rec in done.records[: launch.count]:
        if rec.id in state.fleet.machines:
            continue
        events.append(
            MachineLaunched(
                rec.id,
                launch.type,
                launch.token,
                at=rec.launched_at,
                provider="" if cfg.providers is None else cfg.provider_of(launch.type),
                zone=rec.zone,
            )
        )
    missing = launch.count - len(events)
    if missing > 0:
        reason = done.error or "the provider started fewer machines than asked"
        h = holds(cfg, launch.type)
        failed = refusal(launch, missing, reason, done.code, done.retryable, done.siblings, h, now)
        log.warning(
            "launch failed", machine_type=launch.type, count=missing, error=reason, kind=failed.kind
        )
        events.append(failed)
    return events


def _booting(status: MachineStatus | None) -> bool:
    """Whether a machine is still on its way up: neither gone nor reachable yet."""
    if status is None or status.state is ProviderState.TERMINATED:
        return False
    return status.state is not ProviderState.RUNNING or not status.address


def _last_result(state: RetryCallState) -> Any:
    """What the last try gave, once the tries are used up (an exception is not raised)."""
    assert state.outcome is not None
    return None if state.outcome.failed else state.outcome.result()


def _error(state: RetryCallState) -> str:
    """The exception a failed try raised, as a log line shows it."""
    assert state.outcome is not None
    return str(state.outcome.exception())


@dataclass
class MachineLifecycle:
    """The provider and SSH calls of one run, on worker threads.

    ``watched`` lists the machines whose end ``describe_soon`` looks for; ``gone`` holds
    machines released or lost, whose bootstrap stops; ``tags`` are what each launch
    tags its machines with besides the run (whom they are charged to: ``cost_tags``).
    """

    cfg: RunConfig
    provider: Provider
    bootstrap: Bootstrapper | None
    inbox: queue.SimpleQueue[object]  # the daemon's
    scheduler: BaseScheduler  # closes tunnels after their grace
    log: Any
    _: KW_ONLY
    watched: Callable[[], list[str]]
    gone: Container[str]
    tags: Callable[[], Mapping[str, str]] = dict

    def __post_init__(self) -> None:
        self._executor = concurrent.futures.ThreadPoolExecutor(4, thread_name_prefix="provider")
        self._boot_executor = concurrent.futures.ThreadPoolExecutor(
            16, thread_name_prefix="bootstrap"
        )
        self._booting: set[str] = set()
        self._describing = threading.Lock()
        self._closing = threading.Event()
        self._futures: set[concurrent.futures.Future[Any]] = set()
        self.queued: frozenset[str] = frozenset()  # the provider queued them at the last look
        self._next_look = 0.0  # monotonic: no describe before (``describe_soon``)

    # --- launch ---------------------------------------------------------------------------

    def launch(self, launch: Launch, avoid_zones: tuple[str, ...] = ()) -> None:
        """Launch on a provider thread; the ``LaunchDone`` comes back on the queue."""
        future = self._submit(self.launch_now, launch, avoid_zones)
        future.add_done_callback(lambda f: self.inbox.put(f.result()))

    def launch_now(self, launch: Launch, avoid_zones: tuple[str, ...] = ()) -> LaunchDone:
        """The provider's answer to ``launch`` (on this thread), never an exception;
        ``avoid_zones``: the type's zones held after reclaims."""
        avoid = {"avoid_zones": avoid_zones} if avoid_zones else {}
        try:
            tags = self.tags()
            records = self.provider.launch(launch.type, launch.count, launch.token, tags, **avoid)
        except AutoscalerError as exc:
            started = exc.records if isinstance(exc, PartialLaunch) else ()
            siblings = self.provider.capabilities.siblings(launch.type)
            return LaunchDone(launch, started, exc.message, exc.code, exc.retryable, siblings)
        except Exception as exc:  # a provider's bug must not lose the launch's money
            return LaunchDone(launch, (), f"{type(exc).__name__}: {exc}")
        return LaunchDone(launch, tuple(records), None)

    # --- boot -----------------------------------------------------------------------------

    def boot(self, mid: str) -> None:
        """Start ``mid``'s agent over SSH (EC2 runs with SSH bootstrap; else nothing)."""
        if self.bootstrap is None or mid in self._booting or not self.bootstrap.handles(mid):
            return
        self._booting.add(mid)
        future = self._boot_executor.submit(self._bootstrap_machine, mid)
        self._futures.add(future)
        future.add_done_callback(self._futures.discard)
        future.add_done_callback(lambda _: self._booting.discard(mid))

    def booting(self, mid: str) -> bool:
        """Whether ``mid``'s SSH bootstrap is under way (it has a timeout of its own)."""
        return mid in self._booting

    def keep_tunnel(self, mid: str) -> None:
        """Open ``mid``'s SSH tunnel again if it dropped (and no bootstrap is under way)."""
        boot = self.bootstrap
        if boot is not None and mid not in self._booting and not boot.alive(mid):
            self.boot(mid)

    def _bootstrap_machine(self, mid: str) -> None:
        """On a bootstrap thread: wait for the instance's address and SSH, start the agent.

        Idempotent: after a restart it re-opens the tunnel to the agent already running.
        Failure becomes a lost machine (terminated, its tasks re-queued), never a crash.
        """
        boot = self.bootstrap
        assert boot is not None
        timeout_s = boot.timeout_s(mid)
        deadline = time.monotonic() + timeout_s
        try:
            status = Retrying(
                stop=stop_after_delay(timeout_s),
                wait=wait_exponential(multiplier=1.0, max=10.0),
                retry=retry_if_result(_booting),
                sleep=self._nap,
                retry_error_callback=_last_result,
            )(self._boot_status, mid)
            if status is None or status.state is ProviderState.TERMINATED:
                return  # the health check reports it lost, if the run still wants it
            if status.address is None or _booting(status):
                raise AutoscalerError("no address before the SSH timeout")
            boot.wait_ssh(mid, status.address, max(1.0, deadline - time.monotonic()))
            if self._closing.is_set() or mid in self.gone:
                return
            port = boot.ensure(mid, status.address)
            self.log.info("agent started over ssh", machine=mid, tunnel_port=port)
        except AutoscalerError as exc:
            self.inbox.put(BootFailed(mid, exc.message))
        except Exception as exc:  # a bootstrap bug must not leave a paid machine idle
            self.inbox.put(BootFailed(mid, f"{type(exc).__name__}: {exc}"))

    def _nap(self, seconds: float) -> None:
        """A wait between two tries, cut short by the end of the run."""
        self._closing.wait(seconds)

    def _boot_status(self, mid: str) -> MachineStatus | None:
        """The machine as the provider shows it; None once the run no longer wants it."""
        if self._closing.is_set() or mid in self.gone:
            return None
        return next(iter(self.provider.describe([mid])), None)

    # --- watch ----------------------------------------------------------------------------

    def describe_soon(self) -> None:
        """Scheduler job: ask the provider which machines ended, unless a question is out
        or the last was asked less than ``agents.describe_s`` ago for a fleet its size
        (the job runs at the provider's own interval)."""
        if time.monotonic() < self._next_look or not self._describing.acquire(blocking=False):
            return
        try:
            self._submit(self._describe_watched)
        except RuntimeError:  # the executor is shutting down: the run is over
            self._describing.release()

    def _describe_watched(self) -> None:
        """On a provider thread: one describe of the machines watched; the ended ones queued."""
        try:
            ids = self.watched()
            base = self.provider.status_polling_interval
            # (half the job's interval early: the job that comes at ``every`` looks)
            self._next_look = (
                time.monotonic() + describe_s(self.cfg.daemon, base, len(ids)) - base / 2
            )
            if not ids:
                return
            statuses = self.provider.describe(ids)
            self.queued = frozenset(st.id for st in statuses if st.state is ProviderState.PENDING)
            ended = [st for st in statuses if st.state is ProviderState.TERMINATED]
            if ended:
                reasons = {st.id: st.reason for st in ended if st.reason}
                self.inbox.put(Ended(frozenset(st.id for st in ended), reasons))
        except Exception as exc:  # throttled past botocore's retries: ask again next time
            self.log.warning("describe failed", error=str(exc)[:300])
        finally:
            self._describing.release()

    # --- the end of a machine -------------------------------------------------------------

    def end(self, mid: str) -> None:
        """Terminate ``mid`` on a provider thread."""
        self._submit(self._end, mid)

    def _end(self, mid: str) -> None:
        """On a provider thread: terminate a machine; its SSH tunnel closes a little later.

        A refused terminate (throttling past botocore's retries) is tried again with
        backoff: a machine released but left running would cost money. The end of the
        run terminates whatever is still up in any case (``terminate_leftovers``).
        """
        try:
            for attempt in Retrying(
                stop=stop_after_attempt(TERMINATE_TRIES),
                wait=wait_exponential(multiplier=2.0, max=30.0),
                sleep=self._nap,
                after=lambda state: self.log.warning(
                    "terminate failed",
                    machine=mid,
                    attempt=state.attempt_number,
                    error=_error(state)[:300],
                ),
                retry_error_callback=_last_result,
            ):
                if attempt.retry_state.attempt_number > 1 and self._closing.is_set():
                    return  # the end of the run terminates what is left
                with attempt:
                    self.provider.terminate([mid])
                    return
            self.log.error("terminate kept failing; the end of the run tries again", machine=mid)
        finally:
            self._close_tunnel_later(mid)

    @property
    def tunnel_grace_s(self) -> float:
        """How long a released machine's tunnel stays open: its agent's answer (release,
        or 410 at its next heartbeat) must get through before the tunnel goes."""
        return 2 * self.cfg.daemon.heartbeat_s + 0.5

    def _close_tunnel_later(self, mid: str) -> None:
        if self.bootstrap is None:
            return
        try:
            self.scheduler.add_job(
                self.bootstrap.close,
                "date",
                run_date=datetime.now().astimezone() + timedelta(seconds=self.tunnel_grace_s),
                args=[mid],
            )
        except Exception as exc:
            self.log.warning(
                "tunnel close not scheduled; the end of the run closes it",
                machine=mid,
                error=str(exc)[:300],
            )

    def kill(self, ids: list[str]) -> None:
        """End every machine of ``ids`` now, without grace (the second signal)."""
        try:
            self.provider.terminate(ids, now=True)
        except Exception as exc:
            self.log.error(
                "kill failed; the end of the run terminates what is left",
                machines=ids,
                error=str(exc)[:300],
            )

    def terminate_leftovers(self) -> None:
        """Every machine of the run the provider still lists ends now (tried with backoff)."""
        for attempt in Retrying(
            stop=stop_after_attempt(TERMINATE_TRIES),
            wait=wait_exponential(multiplier=1.0, max=30.0),
            after=lambda state: self.log.warning(
                "end-of-run terminate failed", attempt=state.attempt_number, error=_error(state)
            ),
            retry_error_callback=_last_result,
        ):
            with attempt:
                left = [
                    s.id
                    for s in self.provider.describe()
                    if s.state is not ProviderState.TERMINATED
                ]
                if left:
                    self.log.warning("terminating machines left at the end", machines=left)
                    self.provider.terminate(left)
                return
        self.log.error(
            "machines of this run may still run: the provider kept refusing; "
            "run `autoscaler cleanup` with this config"
        )

    # --- threads --------------------------------------------------------------------------

    def _submit(self, fn: Callable[..., Any], *args: Any) -> concurrent.futures.Future[Any]:
        future = self._executor.submit(fn, *args)
        self._futures.add(future)
        future.add_done_callback(self._futures.discard)
        future.add_done_callback(lambda _: self.inbox.put(Wake()))
        return future

    def wind_down(self, kill_asked: Callable[[], bool], kill: Callable[[], None]) -> None:
        """The end of the run: retries and bootstraps stop waiting; the calls under way
        get 30 s (``kill`` if ``kill_asked`` meanwhile); what the provider still lists is
        terminated; released agents hear it before their tunnels close."""
        self._closing.set()
        deadline = time.monotonic() + 30
        while self._futures and time.monotonic() < deadline:
            if kill_asked():
                kill()
            concurrent.futures.wait(list(self._futures), timeout=0.1)
        self.terminate_leftovers()
        if self.bootstrap is not None:
            time.sleep(self.tunnel_grace_s)

    def shutdown(self) -> None:
        """Wait for every thread, then close every SSH tunnel."""
        self._executor.shutdown(wait=True)
        self._boot_executor.shutdown(wait=True)
        if self.bootstrap is not None:
            self.bootstrap.close_all()
