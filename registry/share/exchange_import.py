"""Writing an ``ExchangeSet`` (a bundle's content, or another registry's records) into a registry, every part checked.

Nothing the sender says is taken on trust but provenance: workload hashes are recomputed from their modules (which
must be of this TVM release), devices are rebuilt from their targets, every trace is replayed by ``RecordValidator``,
and every record arrives "imported" (unless it was measured here in the first place). Records keep their origin, so
two registries' measurements of one schedule are both kept; re-reading the same set adds nothing. A bundle's
predictors, checked as it is read (``registry.share.bundle``), are stored after its records, each once per device.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import orjson

from registry import hostinfo
from registry.errors import BadInputError
from registry.records.validator import RecordValidator
from registry.records.write import Batch, Progress, checked_write
from registry.share.bundle import read_bundle
from registry.share.log_import import checked_workload
from registry.store.interface import (
    DeviceSpec,
    IngestExtras,
    IngestResult,
    RecordIn,
    RecordStorage,
    RegistryStorage,
    WorkloadIn,
)
from registry.store.rows import GPU_KINDS
from registry.store.validation import (
    Problem,
    effort_problem,
    model_problem,
    name_problem,
    origin_problem,
    weight_problem,
)
from registry.store.values import ExchangeSet, ExPredictor, ExRecord, PredictorIn
from registry.tvm_side.target import canonical_target


def import_exchange(
    store: RecordStorage,
    exchange: ExchangeSet,
    *,
    where: str,
    skip_invalid: bool = False,
    progress: Progress | None = None,
    sync_mark: tuple[str, str, int] | None = None,
) -> IngestResult:
    """Write ``exchange`` into ``store`` in one transaction; ``where`` names its source in messages. ``sync_mark``:
    the sync progress to record in the same transaction."""
    validator = RecordValidator()
    validator.pool.start()  # a replay worker's TVM import, overlapping the workload checks
    progress = progress or (lambda _done, _total, _what: None)
    progress(0, exchange.n_records, f"checking {len(exchange.workloads)} workloads")
    workloads = {w.ident: sent_workload(w, where) for w in exchange.workloads}
    devices = {d.key: sent_device(d, where) for d in exchange.devices}
    insts = {h: (text, _json(text, f"{where}: skeleton {h}")) for h, text in exchange.skeletons.items()}
    for m in exchange.models:
        tasks = (p for _, task, weight in m.tasks for p in (name_problem(task, "task name"), weight_problem(weight)))
        problem = (
            name_problem(m.name, "model name")
            or model_problem(m.sha256, m.input_shapes)
            or next((p for p in tasks if p), None)
        )
        if problem:
            raise BadInputError(f"{where}: model {m.name!r:.60}: {problem}")
    seen = set()
    for e in exchange.efforts:
        problem = effort_problem(e.trials, e.seconds, e.curve, e.plateau)
        if problem:
            raise BadInputError(f"{where}: the effort on workload {e.workload[0]}: {problem}")
        if (e.workload, e.device_key) in seen:  # one task's effort per device: which of two would be true?
            raise BadInputError(f"{where}: two efforts on workload {e.workload[0]} on one device")
        seen.add((e.workload, e.device_key))
    extras = IngestExtras(
        local={sent: w.ident for sent, w in workloads.items()},
        models=[(m.name, m.sha256, m.input_shapes, m.tasks) for m in exchange.models],
        sync_mark=sync_mark,
        efforts=[(e.workload, e.device_key, e.trials, float(e.seconds), e.curve, e.plateau) for e in exchange.efforts],
    )

    def batches() -> Iterator[Batch]:
        extras.donors.clear()  # read again from the start: a write that lost a lock race starts over
        for chunk in exchange.records():
            batch = [(f"{where}: record {r.source_id}", _record(r, workloads, devices, insts)) for r in chunk]
            for r, (_, rec) in zip(chunk, batch, strict=True):
                if r.donor is not None and isinstance(rec, RecordIn):
                    extras.donors.append((rec, r.donor))
            yield batch

    unique = list({w.ident: w for w in workloads.values()}.values())
    return checked_write(
        store, unique, batches, validator=validator, skip_invalid=skip_invalid, progress=progress,
        total=exchange.n_records, extras=extras,
    )  # fmt: skip


def sent_workload(w, where: str) -> WorkloadIn:
    """A workload as sent, checked: its module (``checked_workload``), and the hash it states against the module's,
    recomputed here. They agree for a bundle of this TVM release from a registry on this platform (the hash is
    platform-dependent); a bundle whose records name one workload and whose module is another is refused."""
    checked = checked_workload(f"{where}: workload {w.shash}", w.mod_json)
    if checked.shash != w.shash:
        raise BadInputError(
            f"{where}: workload {w.shash} holds a module whose structural hash is {checked.shash} here "
            "(altered, or written on another platform: TVM's hash is platform-dependent)"
        )
    return checked


def _json(text: str, where: str):
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError as e:
        raise BadInputError(f"{where}: not JSON ({e})") from None


def sent_device(d, where: str) -> DeviceSpec:
    """The device as sent, rebuilt here: its target canonical, its runtime threads what ``DeviceSpec.of`` gives (a
    GPU's 0, a CPU's 1 to hostinfo.MAX_THREADS: an INTEGER column), its hardware a name fit to print."""
    if not (isinstance(d.target, dict) and type(d.tvm_version) is str and type(d.key) is str):
        raise BadInputError(f"{where}: a device's target, TVM version or key is of the wrong type")
    ours = hostinfo.tvm_version()
    if hostinfo.release(d.tvm_version) != ours:
        raise BadInputError(
            f"{where}: records measured with TVM {d.tvm_version!r:.40}, but this registry runs TVM {ours}; schedules "
            "and hashes do not carry across TVM releases"
        )
    target = canonical_target(d.target)
    gpu = target.get("kind") in GPU_KINDS
    threads = d.num_threads
    if type(threads) is not int or not (threads == 0 if gpu else 1 <= threads <= hostinfo.MAX_THREADS):
        expected = "0 (a GPU's)" if gpu else f"a whole number from 1 to {hostinfo.MAX_THREADS}"
        raise BadInputError(f"{where}: device {d.key[:12]} runs {threads!r:.40} threads, not {expected}")
    problem = name_problem(d.host_model, "host model") if d.host_model is not None else "host model is not text"
    if problem:
        raise BadInputError(f"{where}: device {d.key[:12]}: {problem}")
    spec = DeviceSpec(target, threads, d.host_model, ours)
    if spec.key != d.key:  # the sender's description and identity disagree: a tampered or foreign device
        raise BadInputError(f"{where}: device {d.key[:12]} does not match its own description")
    return spec


def _record(
    r: ExRecord,
    workloads: dict[tuple[str, str], WorkloadIn],
    devices: dict[str, DeviceSpec],
    insts: dict[str, tuple[str, list]],
) -> RecordIn | Problem:
    workload, device, skeleton = workloads.get(r.workload), devices.get(r.device_key), insts.get(r.skeleton)
    if workload is None or device is None or skeleton is None:
        return Problem("refers to a workload, device or instruction list the set does not hold", trace=False)
    problem = (
        origin_problem(r.origin)
        or (r.donor and origin_problem(r.donor[3]))
        or name_problem(r.tool_version, "tool version")
    )
    if problem:  # a record that travels says which registry measured it, and its donor which measured that
        return Problem(problem, trace=False)
    if not r.run_secs:  # a registry writes a failed run's stand-in, never nothing
        return Problem("it states no latencies", trace=False)
    if r.donor is not None and (r.donor[0] not in workloads or r.donor[1] not in devices):
        # A set carries its records' donors' workloads and devices: a donor outside it could name anything.
        return Problem("it names a donor whose workload or device the set does not hold", trace=False)
    try:
        decisions = orjson.loads(r.decisions_json)
    except orjson.JSONDecodeError:
        return Problem("its decisions are not JSON")
    return RecordIn(
        workload=workload.ident,
        device=device,
        trace=[skeleton[1], decisions],
        insts_json=skeleton[0],
        run_secs=tuple(r.run_secs),
        source=r.source,
        tool_version=r.tool_version,
        team=r.team,
        model=r.model,
        host=r.host,
        origin=r.origin,
        trust="imported",
        created_at=r.created_at,
    )


@dataclass
class BundleImport(IngestResult):
    predictors_new: int = 0
    predictors_present: int = 0  # already stored for their device (the same blob)


def import_bundle(
    store: RegistryStorage, path: Path, *, skip_invalid: bool = False, progress: Progress | None = None
) -> BundleImport:
    """``registry import BUNDLE``: checksums and predictors first, then everything as ``import_exchange`` checks it,
    then the predictors."""
    exchange, _manifest = read_bundle(path)
    result = import_exchange(store, exchange, where=str(path), skip_invalid=skip_invalid, progress=progress)
    stored = list(import_predictors(store, exchange, where=str(path)))
    return BundleImport(
        **dataclasses.asdict(result), predictors_new=sum(stored), predictors_present=len(stored) - sum(stored)
    )


def import_predictors(store: RegistryStorage, exchange: ExchangeSet, *, where: str) -> Iterator[bool]:
    """Store each predictor of ``exchange`` as its device's next version, unless that device holds its blob already:
    True for each stored, False for each already there. Its metrics keep the registry that trained it ("origin", the
    sender unless it says another) and the blob's sha256 ("blob_sha256"), by which a second import finds it."""
    devices = {d.key: d for d in exchange.devices}
    for p in exchange.predictors():
        device_id = store.add_device(sent_device(devices[p.device_key], where))
        if _holds(store, device_id, p):
            yield False
            continue
        metrics = {"origin": exchange.origin} | p.metrics | {"blob_sha256": p.sha256}
        store.save_predictor(PredictorIn(device_id, p.kind, p.blob, metrics, p.n_workloads, p.n_records, p.tvm_version))
        yield True


def _holds(store: RegistryStorage, device_id: int, p: ExPredictor) -> bool:
    """Whether the device holds ``p``'s blob: an imported predictor by the sha256 its metrics keep, one trained
    here when it is still the newest of its kind."""
    for info in store.list_predictors(device_id):
        if info.kind == p.kind and isinstance(info.metrics, dict) and info.metrics.get("blob_sha256") == p.sha256:
            return True
    newest = store.latest_predictor(device_id, p.kind)
    return newest is not None and hashlib.sha256(newest.blob).hexdigest() == p.sha256
