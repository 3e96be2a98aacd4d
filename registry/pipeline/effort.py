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
  then skips it unless ``--retune``. Only an effort measured on this registry counts: one another registry sent is
  its claim, read here as none (``registry.store.sql.efforts``), so a pushed or pulled plateau never stops tuning.
- **Bounds.** A lease lasts at most a day (``validation.MAX_LEASE_S``); a stored one past it counts as expired, so
  no run waits for ever. ``registry db release-leases`` frees at once the leases of runs that have ended
  (``may_be_running``).
"""

from __future__ import annotations

import os
import secrets
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field

from registry import hostinfo
from registry.options import TUNE
from registry.store.interface import RegistryStorage
from registry.store.values import IMPORTED_EFFORT, NO_EFFORT, Effort, EffortUpdate

PLATEAU_GAIN = 0.01  # a task whose last `window` trials improved its best by less than this has plateaued
CURVE_POINTS = 256  # the most points a task's curve keeps; older ones are thinned


def holder_name() -> str:
    """This run's name in the leases it holds: host, process and a random part (a pid is reused)."""
    return f"{hostinfo.hostname()[:120]}:{os.getpid()}:{secrets.token_hex(4)}"


def may_be_running(holder: str) -> bool:
    """Whether the run named ``holder`` (``holder_name``) may still be running: False only for a process of this host
    that has ended. Another host's run, or a name of another form, cannot be checked from here."""
    host, _, rest = holder.partition(":")
    pid = rest.partition(":")[0]
    if host != hostinfo.hostname()[:120] or not pid.isdigit():
        return True
    try:
        os.kill(int(pid), 0)  # signal 0: only asks whether the process exists
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError):
        return True  # another user's process (or a pid no process can have: a name not this version's)
    return True


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
    window: int = TUNE.plateau  # trials
    lease_s: float = TUNE.lease  # how long a lease outlives its run's last batch: a killed run's tasks wait this long
    retune: bool = False  # search on past a plateau (registry tune --retune): the planner's rules alone stop a task
    holder: str = field(default_factory=holder_name)
    held: dict[int, _Held] = field(default_factory=dict)  # by workload id
    saved: dict[int, int] = field(default_factory=dict)  # this run's measurements of a task already in its effort
    warned: set[str] = field(default_factory=set)  # the store's warnings this run showed: each once, not every batch

    def read(self, workload_ids: Sequence[int]) -> dict[int, Effort]:
        """Every task's effort as measured on this registry (NO_EFFORT for one never tuned here, or only claimed by
        another registry: an imported effort neither stops nor shortens a task's tuning, nor counts in a budget)."""
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            found = self.store.efforts(list(workload_ids), self.device_id)
        for w in caught:
            if str(w.message) not in self.warned:
                self.warned.add(str(w.message))
                warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
        mine = {w: e for w, e in found.items() if e.holder != IMPORTED_EFFORT}
        return {w: mine.get(w, NO_EFFORT) for w in workload_ids}

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
        update = EffortUpdate(workload_id, self.device_id, self.holder, (added, 0.0), h.curve, plateau, None)
        if self.store.save_effort(update):
            self.saved[workload_id] = measurements

    def after_batch(
        self, workload_id: int, measurements: int, seconds: float, best_us: float | None, exhausted: bool, done: bool
    ) -> tuple[bool, bool]:
        """Record a batch of a held task: ``measurements``, this run's on it so far; ``done``: it stopped, release it.
        Returns (still held, plateaued). Not held: the lease expired and another run took the task."""
        h = self.held[workload_id]
        added = measurements - self.saved.get(workload_id, 0)
        h.trials += added
        if best_us is not None:  # the task's best so far never rises: a run that reads fewer records
            # (--trust verified) may start above the curve another run left
            best_us = min(best_us, h.curve[-1][1]) if h.curve else best_us
            h.curve = thinned([*h.curve, (h.trials, best_us)])
        plateau = exhausted or plateaued(h.curve, self.window)
        release = done or (plateau and not self.retune)
        kept = self.store.save_effort(
            EffortUpdate(
                workload_id,
                self.device_id,
                self.holder,
                (added, seconds),
                h.curve,
                plateau,
                None if release else self.lease_s,
            )
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
