"""Every record validated against its workload, at the cost of a few replays per instruction list.

``RecordValidator.validate`` is the one validation of records that come from outside: ``registry import``, bundles,
sync, tuning and ``RegistryDatabase.commit_tuning_record`` all reach it through ``registry.records.write``
(``RecordWriter``, ``checked_write``); ``RegistryStorage.ingest``'s ``check`` defaults to the pure-Python checks
alone. A record is valid when its latencies are measurements (or TVM's failed-run stand-in) that some device could
reach for its workload's FLOPs, its trace is what MetaSchedule writes for its device's kind, and TVM replays it on
its workload exactly: every instruction applies and every decision is kept as written.

Replaying each record would cost milliseconds each; logs hold millions. So, per record, only pure-Python checks run
(``registry.store.validation``: every decision indexes a sampling instruction, categorical choices index their
candidates, tile sizes are positive, and multiply to their loop's extent), and replays happen once per distinct key:

- *facts* per (workload, instructions before the postprocessors, compute-location decisions): each tile sampler's
  loop extent. Compute locations are in the key because they change the loop nest itself. An extent that turns
  out to depend on other decisions (see ``replay._facts``) is not used: such records are replayed one by one.
- *applies* per (workload, whole instruction list, compute locations): one record replayed with its own decisions,
  postprocessors included. If it does not apply, the next record of the key is tried, up to MAX_TRIES.

Every replay runs in ``replay_pool``'s worker processes: before a key's first replay, nothing about its instructions
has been vouched for, and a trace that crashes TVM costs a worker, never the caller.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from registry.records.replay_pool import Job, ReplayPool, shared_pool
from registry.store.rows import RecordIn, canonical_json
from registry.store.validation import UNSEEN, Problem, SkeletonCache, rate_problem, read_record, tile_problem

MAX_TRIES = 3  # records of one instruction list replayed before the list is judged not to apply


@dataclass
class _Facts:
    extents: dict[int, int | None]
    dependent: frozenset[int]
    verdicts: dict = field(default_factory=dict)  # (instruction, tile sizes) -> tile_problem, remembered
    # per instruction list: its tiles these extents settle as (index, sampler, extent), and whether it has a
    # decision they depend on (its records are replayed one by one)
    plans: dict[str, tuple[tuple, bool]] = field(default_factory=dict)


@dataclass
class _Applies:
    ok: bool = False
    failures: list[str] = field(default_factory=list)


@dataclass(slots=True)
class _Item:
    index: int
    record: RecordIn
    mod_json: str
    decisions: dict[int, Any]
    samplers: dict
    facts_key: tuple
    applies_key: tuple


class RecordValidator:
    """Checks records against their workloads, remembering what it learned for the records that follow (an import
    checks its batches with one validator)."""

    def __init__(self, pool: ReplayPool | None = None) -> None:
        self.pool = pool or shared_pool()
        self.skeletons = SkeletonCache()
        self._prefix_json: dict[str, str] = {}
        self._facts: dict[tuple, _Facts | str] = {}  # a str: why no record of the key applies
        self._applies: dict[tuple, _Applies] = {}
        self._module_keys: dict[str, str] = {}  # module JSON -> its key in the replay workers (see _module_key)
        # workload -> (its FLOPs, the narrowest element type in bits), learned with its first facts: the fastest
        # latency any device could measure for it (``rate_problem``)
        self._work: dict[tuple[str, str], tuple[float, int]] = {}

    def validate(self, records: Sequence[tuple[RecordIn, str]]) -> list[Problem | None]:
        """For each (record, its workload's module JSON): None when valid, else why not. Never raises for a bad
        record."""
        reasons: list[Problem | None] = [None] * len(records)
        todo = []
        for i, (record, mod_json) in enumerate(records):
            item = self._item(i, record, mod_json)
            if isinstance(item, Problem):
                reasons[i] = item
            else:
                todo.append(item)
        while todo:
            todo = self._round(todo, reasons)
        for i, (record, _) in enumerate(records):
            work = self._work.get(record.workload) if reasons[i] is None else None
            problem = work and rate_problem(record.run_secs, *work)
            if problem:
                reasons[i] = Problem(problem, trace=False)
        return reasons

    def _item(self, i: int, record: RecordIn, mod_json: str) -> _Item | Problem:
        read = read_record(record, self.skeletons)
        if isinstance(read, Problem):
            return read
        skeleton, decisions, insts_json = read
        prefix = self._prefix_json.get(insts_json)
        if prefix is None:
            prefix = self._prefix_json[insts_json] = canonical_json(record.trace[0][: skeleton.prefix])
        locations = tuple([decisions[i] for i in skeleton.locations])  # checked integers: a key as they are
        return _Item(
            i,
            record,
            mod_json,
            decisions,
            skeleton.samplers,
            facts_key=(record.workload, prefix, locations),
            applies_key=(record.workload, insts_json, locations),
        )

    # -- one round: settle what the known facts settle, replay one record per unknown key --------------------------

    def _round(self, todo: list[_Item], reasons: list[Problem | None]) -> list[_Item]:
        jobs: list[tuple[Job, list[_Item], str]] = []  # job, the items its reply settles, what it is for
        replaying: dict[tuple, list[_Item]] = {}  # records replayed one by one, by their whole trace
        keyed: set[tuple] = set()  # applies keys with a representative in this round
        wanted_facts: set[tuple] = set()
        waiting = []
        for item in todo:
            facts = self._facts.get(item.facts_key)
            applies = self._applies.get(item.applies_key)
            if applies is None:
                applies = self._applies[item.applies_key] = _Applies()
            if isinstance(facts, str):
                reasons[item.index] = Problem(facts)
                continue
            if not applies.ok and len(applies.failures) >= MAX_TRIES:
                reasons[item.index] = Problem(applies.failures[0])
                continue
            verdict = self._against(item, facts) if facts is not None else None
            if verdict:  # wrong whatever the replay would say
                reasons[item.index] = Problem(verdict)
            elif applies.ok and facts is not None and not self._needs_replay(item, facts):
                pass  # valid
            elif applies.ok and facts is not None:
                replaying.setdefault(canonical_json(item.record.trace), []).append(item)
            elif item.applies_key in keyed:
                waiting.append(item)  # settled by this round's representative of its key
            else:
                keyed.add(item.applies_key)
                want = facts is None and item.facts_key not in wanted_facts
                wanted_facts.add(item.facts_key)
                jobs.append((self._job(item, want), [item], "representative"))
        for items in replaying.values():
            jobs.append((self._job(items[0], False), items, "replay"))
        replies = self.pool.run([job for job, _, _ in jobs])
        for (job, items, role), reply in zip(jobs, replies, strict=True):
            self._settle(job, items, role, reply, reasons)
        return waiting

    def _job(self, item: _Item, facts: bool) -> Job:
        return Job(self._module_key(item), item.mod_json, item.record.trace, facts)

    def _module_key(self, item: _Item) -> str:
        """What the replay workers keep a parsed module under: the workload and a digest of the module itself. Two
        copies of one workload (two models') share its structural hash but not their block names, which traces name."""
        key = self._module_keys.get(item.mod_json)
        if key is None:
            digest = hashlib.sha256(item.mod_json.encode()).hexdigest()[:16]
            key = self._module_keys[item.mod_json] = f"{item.record.workload[0]}:{item.record.workload[1]}:{digest}"
        return key

    def _plan(self, item: _Item, facts: _Facts) -> tuple[tuple, bool]:
        insts_json = item.applies_key[1]
        plan = facts.plans.get(insts_json)
        if plan is None:
            tiles = tuple(
                (index, sampler, facts.extents.get(index))
                for index, sampler in item.samplers.items()
                if sampler.is_tile and index not in facts.dependent
            )
            plan = facts.plans[insts_json] = (tiles, not facts.dependent.isdisjoint(item.samplers))
        return plan

    def _against(self, item: _Item, facts: _Facts) -> str | None:
        """What the known extents say about the item's tiles (None: nothing wrong, or nothing they can tell)."""
        verdicts, decisions = facts.verdicts, item.decisions
        for index, sampler, extent in self._plan(item, facts)[0]:
            value = decisions[index]
            key = (index, tuple(value))  # a list of ints (read_decisions checked): its tuple tells it apart
            problem = verdicts.get(key, UNSEEN)
            if problem is UNSEEN:
                problem = verdicts[key] = tile_problem(sampler, value, extent)
            if problem:
                return f"instruction {index} ({sampler.kind}): {problem}"
        return None

    def _needs_replay(self, item: _Item, facts: _Facts) -> bool:
        return self._plan(item, facts)[1]

    def _settle(self, job: Job, items: list[_Item], role: str, reply: dict, reasons: list[Problem | None]) -> None:
        item = items[0]
        if not reply.get("applies"):
            why = f"the trace does not apply to its workload ({reply.get('error', 'no reason given')})"
            for it in items:
                reasons[it.index] = Problem(why)
            if role == "representative":
                self._applies[item.applies_key].failures.append(why)
            return
        if role == "representative":
            self._applies[item.applies_key].ok = True
        if job.facts:
            if "flops" in reply:
                self._work[item.record.workload] = (reply["flops"], reply["bits"])
            if reply.get("locations_kept"):
                dependent = frozenset(reply.get("dependent") or ())
                self._facts[item.facts_key] = _Facts({i: e for i, e in reply.get("extents") or ()}, dependent)
            else:  # the key's compute locations are not locations of this workload's blocks
                self._facts[item.facts_key] = f"the trace does not apply to its workload ({reply['rewritten']})"
        if reply.get("rewritten"):
            facts = self._facts.get(item.facts_key)
            for it in items:  # said as the cheap check says it, where it can
                known = self._against(it, facts) if isinstance(facts, _Facts) else None
                reasons[it.index] = Problem(known or f"{reply['rewritten']}: not the schedule that was measured")
