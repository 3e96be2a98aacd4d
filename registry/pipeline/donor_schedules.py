"""Candidate schedules for a task from its donors' stored traces: what transfer measures, and what seeds tuning.

Both ask the same two questions, here: which stored records may donate (``find``: the nearest stored workloads of
the task's operator kind, from the FAISS index), and which distinct programs their traces make of the task
(``distinct``)."""

from __future__ import annotations

import json
from collections.abc import Iterator

import tvm
from tvm.ir import IRModule
from tvm.s_tir.schedule import Schedule
from tvm.target import Target

from registry.similarity.donors import Donor, donor_order, find_donors
from registry.similarity.index import SimilarityIndex
from registry.store.embedding import embed
from registry.store.interface import RegistryStorage
from registry.tvm_side import apply_trace
from registry.tvm_side.signature import structural_hash


class DonorSchedules:
    """Applies donors' traces to tasks of one target; keeps each donor's workload module once loaded."""

    def __init__(self, store: RegistryStorage, target: Target) -> None:
        self.store, self.target = store, target
        self._donor_mods: dict[int, IRModule] = {}

    def find(self, index: SimilarityIndex, task, device_id: int, neighbours: int, per_device: int = 2) -> list[Donor]:
        """The stored records that may donate to ``task`` (a ``RunTask``), in the order worth trying: those of
        its ``neighbours`` nearest other workloads of the same operator kind (see ``find_donors``), and the task's
        own workload's records on sibling devices (other devices of the target kind: another mcpu, thread count or
        GPU), which are the nearest of all. Its records on this device are no donors: they are the task's own."""
        kind = self.target.kind.name
        near = find_donors(
            index,
            embed(task.signature),
            device_id,
            kind,
            k=neighbours,
            per_device=per_device,
            exclude=frozenset({task.workload_id}),
        )
        own = [
            Donor(r.record, task.workload_id, r.task_name, 0.0, False, r.rank, r.flops, r.source, r.device_id)
            for r in self.store.donor_records([task.workload_id], per_device, kind)
            if r.device_id != device_id
        ]
        return sorted(own + near, key=donor_order)

    def distinct(self, mod: IRModule, donors: list[Donor], count: int, resample: int) -> list[tuple[Donor, Schedule]]:
        """Up to ``count`` distinct programs made of ``mod`` by the donors (``candidates``), trying at most four
        times as many: two donors, or a donor and a re-sample, can give the same program."""
        picked: list[tuple[Donor, Schedule]] = []
        seen: set[str] = set()
        for attempt, (donor, sch) in enumerate(self.candidates(mod, donors, resample)):
            key = structural_hash(sch.mod)
            if key not in seen:
                seen.add(key)
                picked.append((donor, sch))
            if len(picked) >= count or attempt + 1 >= 4 * count:
                break
        return picked

    def candidates(self, mod: IRModule, donors: list[Donor], resample: int) -> Iterator[tuple[Donor, Schedule]]:
        """(donor, schedule) pairs: every donor record as it is, then the two nearest donors' decisions re-sampled
        with seeds 1..``resample``. Several pairs may give the same program: callers deduplicate."""
        for donor in donors:
            trace = _trace(donor)
            sch = apply_trace.replay(mod, self.target, trace)
            if sch is None:
                sch = apply_trace.via_anchor(mod, self.target, self._donor_mod(donor.workload_id), trace)
            if sch is not None:
                yield donor, sch
        for seed in range(1, resample + 1):
            for donor in donors[:2]:
                sch = apply_trace.replay(mod, self.target, _trace(donor), resample=True, seed=seed)
                if sch is not None:
                    yield donor, sch

    def _donor_mod(self, workload_id: int) -> IRModule:
        if workload_id not in self._donor_mods:
            stored = self.store.workloads_by_id([workload_id])[workload_id]
            self._donor_mods[workload_id] = tvm.ir.load_json(stored.mod_json)
        return self._donor_mods[workload_id]


class RunDonors:
    """Donor schedules for a tuning run's tasks, found when each task's first batch comes: the registry's donors, and
    the tasks this run tuned before it. A CNN's convolutions repeat with other channel counts and resolutions, so
    the first ones tuned seed the rest, which would otherwise start from random samples of their design spaces."""

    def __init__(
        self,
        store: RegistryStorage,
        target: Target,
        device_id: int,
        neighbours: int,
        per_task: int,
        index: SimilarityIndex | None = None,
    ) -> None:
        """``index``: one the caller loaded already (transfer's, with its run's transfers added), else loaded here."""
        if index is None:
            index = SimilarityIndex(store)
            index.load()
        self.index = index
        self.schedules = DonorSchedules(store, target)
        self.device_id, self.neighbours, self.per_task = device_id, neighbours, per_task

    def seeds(self, task) -> list[Schedule]:
        """Up to ``per_task`` distinct schedules of ``task`` (a ``RunTask``) from its donors' best records."""
        donors = self.schedules.find(self.index, task, self.device_id, self.neighbours)
        return [sch for _, sch in self.schedules.distinct(task.mod, donors, self.per_task, resample=0)]

    def tuned(self, task) -> None:
        """``task`` has a good record now: a donor for the tasks that start after it."""
        self.index.add(task.workload_id, embed(task.signature))


def _trace(donor: Donor) -> list:
    return json.loads(donor.record.trace_json)
