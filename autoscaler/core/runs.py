"""Runs of tasks on machines: queued, started, ended, moved, taken back.

The part of the fold (``core.fold``) that keeps a machine's queue and runs: a task queued
on a machine gets its run number there (its agent is sent the whole queue, a task
group), starts as the machine's slots free up, and ends with a result, without one, or
taken back from the queue; what a run that ended teaches its type's runtimes.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence

from autoscaler.core.model import MachineState, TaskState
from autoscaler.core.records import Machine, RunRecords, Segment, StateError

# Enum members looked up once: reading ``MachineState.READY`` calls a descriptor.
_READY = MachineState.READY
_DONE = TaskState.DONE
_PENDING = TaskState.PENDING
_RUNNING = TaskState.RUNNING


class Runs(RunRecords):
    """``RunRecords`` with the mechanics of runs; ``core.fold.Fold`` applies records."""

    def _done_after_all(self, m: Machine, tid: int, runtime_s: float) -> None:
        """A task taken back from ``m``'s queue that its agent had started (or finished)
        before it heard: its result counts, and the copies queued or running elsewhere
        end (the first result wins), so it never runs to success twice."""
        if tid not in m.taken or self.task_state[tid] not in (_RUNNING, _PENDING):
            return
        m.taken.discard(tid)
        if self.task_state[tid] is _PENDING:
            self.pending.remove(tid)
        self.task_state[tid] = _DONE
        self.done += 1
        m.tasks_done += 1
        self.segments.append(Segment(tid, m.id, max(0.0, self.now - runtime_s), self.now, "done"))
        for other in self.alive_machines():
            if tid in other.queue or tid in other.running:
                self._cancel(tid, other.id)
        self.running_on.pop(tid, None)
        for token, queues in self.launch_queues.items():
            self.launch_queues[token] = deque(tuple(t for t in q if t != tid) for q in queues)

    def _finish_run(self, tid: int, mid: str, outcome: str, runtime_s: float) -> bool:
        """Close the run of ``tid`` on ``mid``; False if there was none (a late replica).

        A counted run (not a replica) teaches the type's runtimes: a result is an
        observed runtime, a failure a censored one (the task needed longer to succeed).
        """
        m = self.machines[mid]
        if tid not in m.running and tid in m.queue and tid in m.run_no:
            # The agent ran it before the state expected (its local queue's order, or
            # slots freed earlier than results said): it started ``runtime_s`` ago.
            m.queue.remove(tid)
            self._track_queue(m)
            self._begin(m, tid, max(m.ready_at or self.now, self.now - runtime_s))
        start = m.running.pop(tid, None)
        if start is None:
            return False
        self._observe(m, tid, runtime_s, ended_with_result=outcome == "done")
        m.run_no.pop(tid, None)
        runs = self.running_on.get(tid)
        if runs is not None:
            runs.pop(mid, None)
            if len(runs) == 1:
                self.solo_gains += 1
        m.busy_s += self.now - start
        self.segments.append(Segment(tid, mid, start, self.now, outcome))
        self._start_queued(m)
        return True

    def _observe(self, m: Machine, tid: int, runtime_s: float, ended_with_result: bool) -> None:
        """What a run that just ended says about its type's runtimes (replicas: nothing;
        they are chosen for being long, so they would bias the estimate)."""
        if tid in m.replicas:
            m.replicas.discard(tid)
            return
        stats = self.stats[m.type.name]
        if ended_with_result and self.jobs:
            job = self.job_of(tid).name
            for key, table in (
                ((job, m.type.name), self.job_runs),
                ((m.id, job), self.machine_job_runs),
            ):
                runs = table.setdefault(key, [0.0, 0.0, 0.0])
                runs[0] += 1
                runs[1] += runtime_s
                runs[2] += runtime_s * runtime_s
        if ended_with_result and tid < len(self.task_category):
            runs = self.category_runs.setdefault((self.task_category[tid], m.type.name), [0.0] * 3)
            runs[0] += 1
            runs[1] += runtime_s
            runs[2] += runtime_s * runtime_s
        if ended_with_result:
            stats.record(runtime_s, tid)
            if tid in self.paired_runs:
                self.paired_runs[tid][m.type.name] = runtime_s
        else:
            stats.censor(max(0.0, runtime_s), tid)

    def _start_queued(self, m: Machine) -> None:
        if m.state is _READY:  # a booting one starts its queue when ready
            while m.queue and len(m.running) < m.type.slots:
                self._begin(m, m.queue.popleft(), self.now)
        self._track_queue(m)

    def _track_queue(self, m: Machine) -> None:
        """Keep ``queued`` (the alive machines with a queue) after ``m``'s queue changed."""
        if m.queue and m.alive:
            self.queued[m.id] = m
        else:
            self.queued.pop(m.id, None)

    def _begin(self, m: Machine, tid: int, at: float) -> None:
        """``tid``, queued on ``m`` (its run number given), starts at ``at``."""
        if self.paired_first_run(tid, m.type.name):
            self.stats[m.type.name].start(tid)
        elif self.running_on.get(tid):
            m.replicas.add(tid)
        else:
            self.stats[m.type.name].start(tid)
        m.running[tid] = at
        runs = self.running_on.setdefault(tid, {})
        runs[m.id] = at
        if len(runs) == 1:
            self.solo_gains += 1

    def _queue_on(self, m: Machine, tids: Sequence[int]) -> None:
        """Queue ``tids`` on ``m``, each with its run number: from here on the machine's
        agent is sent them (a task group), and runs them as its slots free up."""
        for tid in tids:
            m.starts += 1
            m.run_no[tid] = m.starts
        self.enqueue(m.queue, tids)
        self._track_queue(m)

    def _drop_run(self, tid: int, mid: str) -> None:
        """A run of ``tid`` on ``mid`` ended without a result: re-queue if it was the last."""
        runs = self.running_on.get(tid)
        if runs is not None:
            runs.pop(mid, None)
            if len(runs) == 1:
                self.solo_gains += 1
        if runs:
            return
        self.running_on.pop(tid, None)
        if self.task_state[tid] is _RUNNING:
            self.task_state[tid] = _PENDING
            self.pending.appendleft(tid)

    def _cancel(self, tid: int, mid: str) -> None:
        """End ``tid`` on ``mid`` without a result, queued or running; nothing if neither."""
        m = self.machines[mid]
        if tid in m.queue:
            m.queue.remove(tid)
            m.run_no.pop(tid, None)
            m.taken.add(tid)
            self._track_queue(m)
            self._drop_run(tid, mid)
        start = m.running.pop(tid, None)
        if start is not None:
            self._observe(m, tid, self.now - start, ended_with_result=False)
            m.run_no.pop(tid, None)
            m.busy_s += self.now - start
            self.segments.append(Segment(tid, mid, start, self.now, "cancelled"))
            self._drop_run(tid, mid)
            self._start_queued(m)

    def _assign(self, m: Machine, tids: Sequence[int]) -> None:
        """Tasks from the bag (or a sampling pick) queued on ``m``, started as slots allow."""
        for tid in tids:
            if self.task_state[tid] is _PENDING:
                if self.pending[0] == tid:
                    self.pending.popleft()
                else:
                    self.pending.remove(tid)
            self.task_state[tid] = _RUNNING
            if len(self.paired) < self.paired_target and tid not in self.paired_runs:
                self.paired.append(tid)
                self.paired_runs[tid] = {}
        self._queue_on(m, tids)
        self._start_queued(m)

    def _move(self, tids: Sequence[int], src: str, dst: str) -> None:
        """Queued tasks change machines; they start on ``dst`` in their order, once it is
        ready and free. A task not queued on ``src``, or a target gone, is a bug."""
        s, d = self.machines.get(src), self.machines.get(dst)
        if s is None or d is None or not d.alive:
            raise StateError(f"move from {src} to {dst}: no such live target")
        missing = [tid for tid in tids if tid not in s.queue]
        if missing:
            raise StateError(f"move from {src} to {dst}: tasks {missing} are not queued there")
        for tid in tids:
            s.queue.remove(tid)
            s.run_no.pop(tid, None)
            s.taken.add(tid)
        self._track_queue(s)
        self._queue_on(d, tids)
        self._start_queued(d)
