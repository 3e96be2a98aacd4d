"""Tuning runs that share a registry divide its tasks, and record how hard each task was searched.

Plain Python, no TVM: the engine (``registry.pipeline.engine``) asks ``Leases`` before it tunes a task and tells it
after every batch.

- **Leases.** A run takes a task's lease (``RegistryStorage.take_task``) before its first batch, and every batch
  renews the leases it holds. A task leased by another run is left to it: the planner gives the batch to another
  task, and when only leased tasks remain the run waits, re-reading the registry, until their leases are released
  (their records are then this run's to use) or expire (their run was killed: this run resumes them from their
  stored records). A stopped task's lease is released at once, and a run releases all of its leases at its end.
  The database is the only coordinator: no daemon, no messages.
- **Effort.** Each batch adds its measured trials and wall seconds to the task's effort and a point to its curve of
  best latency over trials. A task has **plateaued** when its last ``window`` trials improved its best latency by
  less than ``PLATEAU_GAIN`` (1%), or when MetaSchedule's search had nothing left to propose; ``registry tune``
  then skips it unless ``--retune``.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Sequence
from dataclasses import dataclass, field

from registry import hostinfo
from registry.store.interface import RegistryStorage
from registry.store.values import NO_EFFORT, Effort

PLATEAU_GAIN = 0.01  # a task whose last `window` trials improved its best by less than this has plateaued
DEFAULT_WINDOW = 64  # trials
DEFAULT_LEASE_S = 300.0  # how long a lease outlives its run's last batch (a killed run's tasks wait this long)
CURVE_POINTS = 256  # the most points a task's curve keeps; older ones are thinned


def holder_name() -> str:
    """This run's name in the leases it holds: host, process and a random part (a pid is reused)."""
    return f"{hostinfo.hostname()[:120]}:{os.getpid()}:{secrets.token_hex(4)}"


def plateaued(curve: Sequence[tuple[int, float]], window: int, gain: float = PLATEAU_GAIN) -> bool:
    """Whether the best latency gained less than ``gain`` over the last ``window`` trials of ``curve``."""
    if not curve:
        return False
    trials, best = curve[-1]
    earlier = [us for n, us in curve if n <= trials - window]
    return bool(earlier) and best >= earlier[-1] * (1 - gain)


def thinned(curve: list[tuple[int, float]], most: int = CURVE_POINTS) -> list[tuple[int, float]]:
    """At most ``most`` points: every other one of the older half dropped while there are more."""
    while len(curve) > most:
        half = len(curve) // 2
        curve = curve[:half:2] + curve[half:]
    return curve


@dataclass
class _Held:
    curve: list[tuple[int, float]]
    trials: int  # the task's effort in trials, every run's, as this run last wrote or read it


@dataclass
class Leases:
    """One run's leases and effort records, on one device."""

    store: RegistryStorage
    device_id: int
    window: int = DEFAULT_WINDOW
    lease_s: float = DEFAULT_LEASE_S
    retune: bool = False  # search on past a plateau (registry tune --retune): the planner's rules alone stop a task
    holder: str = field(default_factory=holder_name)
    held: dict[int, _Held] = field(default_factory=dict)  # by workload id
    saved: dict[int, int] = field(default_factory=dict)  # this run's measurements of a task already in its effort

    def read(self, workload_ids: Sequence[int]) -> dict[int, Effort]:
        """Every task's effort as stored now (NO_EFFORT for one never tuned)."""
        found = self.store.efforts(list(workload_ids), self.device_id)
        return {w: found.get(w, NO_EFFORT) for w in workload_ids}

    def take(self, workload_id: int, best_us: float | None) -> str | None:
        """Take or renew a task's lease before a batch of it: None when this run holds it now, else the run that does
        (another run took it when this run's lease expired). ``best_us``: its best record's latency now, the curve's
        first point when it has none."""
        other = self.store.take_task(workload_id, self.device_id, self.holder, self.lease_s)
        if other is not None:
            self.held.pop(workload_id, None)
        elif workload_id not in self.held:
            effort = self.read([workload_id])[workload_id]  # after taking it: what the last holder left
            curve = list(effort.curve) or ([(0, best_us)] if best_us is not None else [])
            self.held[workload_id] = _Held(curve, effort.trials)
        return other

    def release(self, workload_id: int, measurements: int) -> None:
        """Release a held task that stopped between its batches (paused for its share of the model), with this
        run's ``measurements`` of it so far, so that another run may take it up meanwhile."""
        h = self.held.pop(workload_id, None)
        if h is None:
            return
        added = measurements - self.saved.get(workload_id, 0)
        h.trials += added
        plateau = plateaued(h.curve, self.window)
        if self.store.save_effort(workload_id, self.device_id, self.holder, (added, 0.0), h.curve, plateau, None):
            self.saved[workload_id] = measurements

    def after_batch(
        self, workload_id: int, measurements: int, seconds: float, best_us: float | None, exhausted: bool, done: bool
    ) -> tuple[bool, bool]:
        """Record a batch of a held task: ``measurements``, this run's on it so far; ``done``: it stopped, release it.
        Returns (still held, plateaued). Not held: the lease expired and another run took the task."""
        h = self.held[workload_id]
        added = measurements - self.saved.get(workload_id, 0)
        h.trials += added
        if best_us is not None:
            h.curve = thinned([*h.curve, (h.trials, best_us)])
        plateau = exhausted or plateaued(h.curve, self.window)
        release = done or (plateau and not self.retune)
        kept = self.store.save_effort(
            workload_id,
            self.device_id,
            self.holder,
            (added, seconds),
            h.curve,
            plateau,
            None if release else self.lease_s,
        )
        if kept:  # else the trials stay unsaved: this run's own, counted by it (``TaskState.measurements``)
            self.saved[workload_id] = measurements
        if release or not kept:
            del self.held[workload_id]
        return kept, plateau

    def renew(self) -> None:
        if self.held:
            self.store.renew_tasks(self.holder, self.lease_s)

    def release_all(self) -> None:
        self.held.clear()
        self.store.release_tasks(self.holder)
