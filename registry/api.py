"""The registry from Python, as the CLI uses it: ``registry.host_target()``, ``registry.database()``,
``registry.transfer()`` and ``registry.tune()`` (re-exported by ``registry``).

Nothing here imports TVM until a function is called, so ``import registry`` stays cheap::

    import registry
    from tvm.s_tir import meta_schedule as ms

    db = registry.database()  # this machine's device, exactly as `registry transfer`/`tune` file records under
    ms.relax_integration.tune_relax(registry.task_module(mod, db.target), None, db.target, work_dir, 2000, database=db)
    ex = registry.compile_model(mod, db)  # the same rewriting as the CLI's: `registry transfer`'s records apply too

    report = registry.transfer("model.onnx", input_shapes={"x": [1, 3, 224, 224]}, output="model.so")
    print(report.final_ms, [t.source for t in report.tasks])
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import numbers
import os
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple, Union

from registry import hostinfo
from registry.errors import BadInputError
from registry.options import TRANSFER, TUNE, TransferOptions, TuneOptions, device_selector, real, whole

if TYPE_CHECKING:
    import onnx
    from tvm.ir import IRModule
    from tvm.target import Target

    from registry.records.database import RegistryDatabase
    from registry.report.model_report import ModelReport
    from registry.store.interface import RegistryStorage
    from registry.store.rows import DeviceSpec
    from registry.tvm_side.frontend import LoadedModel

    TargetLike = Union[Target, dict, str, None]  # noqa: UP007 - evaluated by type checkers only
    ModelLike = Union[str, os.PathLike, bytes, onnx.ModelProto, IRModule]  # noqa: UP007
    StoreLike = Union[RegistryStorage, str, os.PathLike, None]  # noqa: UP007


__all__ = [
    "ModelSpec",
    "compile_model",
    "database",
    "host_device",
    "host_target",
    "load_model",
    "task_module",
    "train_predictor",
    "transfer",
    "tune",
    "tune_models",
]


def host_target(num_cores: int | None = None) -> Target:
    """This machine's CPU as the llvm target the CLI measures and files records for: ``mcpu`` and ``mtriple`` spelled
    out, ``num-cores`` all of its cores. A target without ``mcpu`` would name another device."""
    from registry.tvm_side.target import host_target as target

    return target(whole("num_cores", num_cores, 1, optional=True))


def host_device(target: TargetLike = None, threads: int | None = None) -> DeviceSpec:
    """The device records for ``target`` (default: ``host_target()``) are filed under when measured here: the target,
    the runtime thread count (``threads``, else ``$TVM_NUM_THREADS``, else TVM's default), this machine's CPU (or GPU)
    and the TVM release. ``device.name`` is what ``registry devices`` lists."""
    from registry.tvm_side.target import device_spec

    return device_spec(_target(target), _threads(threads))


def database(
    target: TargetLike = None,
    db: StoreLike = None,
    *,
    threads: int | None = None,
    team: str | None = None,
    model: str | None = None,
    source: str = "tuned",
    host_model: str | None = None,
) -> RegistryDatabase:
    """A MetaSchedule database over the registry, bound to the device the CLI uses for ``target`` on this machine.

    ``target``: None (this CPU, ``host_target()``), ``"host"``, ``"cuda"``, a TVM target as JSON text or dict (an llvm
    one without ``num-cores`` gets this machine's), or a ``tvm.target.Target``. ``db``: a ``Store``, a database URL or
    an SQLite file path (default: ``$REGISTRY_DATABASE_URL``, else the per-user SQLite file). ``team``, ``model``,
    ``source``: provenance written on every record it commits. ``host_model``: the CPU or GPU the records are
    measured on, where it is not this machine's (a GPU's as ``registry devices`` shows it where it was measured, e.g.
    "NVIDIA H100 80GB HBM3 (driver 580.65.06, CUDA 13.0)"); a GPU target on a machine without that GPU needs it.

    Tune with ``db.target``, the target the device was made for: MetaSchedule writes the records through the
    database, and a record for another target is refused rather than filed under a second device.
    """
    from registry.records.database import RegistryDatabase, check_provenance
    from registry.tvm_side.target import device_spec

    check_provenance(source, team, model)  # before the registry is opened, or created
    _label(host_model, "host_model")
    target_, threads_ = _target(target), _threads(threads)
    device = device_spec(target_, threads_, host_model) if host_model else None
    return RegistryDatabase(
        target_, _store(db), num_threads=threads_, device=device, source=source, team=team, model=model
    )


def compile_model(mod: IRModule, db: RegistryDatabase, *, exact_math: bool = False):
    """``mod`` (a Relax module as ``from_onnx`` makes it, weights bound as constants) compiled with ``db``'s best
    records, as ``registry transfer`` and ``tune`` compile: returns the ``relax.Executable``.

    The registry tunes a model after rewriting it (``registry.tvm_side.compile.model_passes``: fast math on a CPU,
    channels-last convolutions with layout-free weights, fusion), so its records are for kernels that plain
    ``compile_relax`` never makes: compiled with that, those kernels keep TVM's default schedules. This runs the same
    rewriting, so the records apply. ``exact_math``: as ``registry transfer --exact-math``.
    """
    from registry.records.database import RegistryDatabase
    from registry.tvm_side.compile import compile_model as compile_with

    if not isinstance(db, RegistryDatabase):
        raise BadInputError(f"db: expected registry.database(...), got {type(db).__name__}")
    return compile_with(db, _relax_module(mod), db.target, exact_math)


def _relax_module(mod: Any) -> IRModule:
    """``mod`` if it is a Relax module (a model file or a ``load_model`` result is named as what it is not)."""
    from tvm.ir import IRModule

    if not isinstance(mod, IRModule):
        raise BadInputError(f"mod: expected a Relax IRModule (load_model(...).mod, say), got {type(mod).__name__}")
    return mod


def task_module(mod: IRModule, target: TargetLike = None, *, exact_math: bool = False) -> IRModule:
    """``mod`` rewritten into the kernels the registry tunes and compiles (``registry.tvm_side.compile``): give this
    to MetaSchedule's ``tune_relax`` with ``database=registry.database(...)``, then compile the module as it came with
    ``compile_model``, and the records tuned apply."""
    from registry.tvm_side.compile import task_module as rewritten

    return rewritten(_relax_module(mod), _target(target), exact_math)


def transfer(
    model: ModelLike,
    *,
    input_shapes: Mapping[str, Sequence[int]] | Sequence[str] | None = None,
    params: Mapping[str, Any] | None = None,
    name: str | None = None,
    target: TargetLike = None,
    threads: int | None = None,
    db: StoreLike = None,
    overlay: str | os.PathLike | None = None,
    output: str | os.PathLike | None = None,
    candidates: int | None = TRANSFER.candidates,
    neighbours: int = TRANSFER.neighbours,
    tune_trials: int = TRANSFER.tune_trials,
    tune_budget: float | None = TRANSFER.tune_budget,
    retune_below: float = TRANSFER.retune_below,
    team: str | None = None,
    rpc: str | None = None,
    dop: int | None = None,
    verbose: bool = False,
    exact_math: bool = False,
    progress: Callable[[int, int, str], None] | None = None,
    measure: bool = TRANSFER.measure,
    device: str | None = TRANSFER.device,
) -> ModelReport:
    """``registry transfer`` from Python: compile ``model`` with the schedules of similar tuned operators, write what
    was measured back, and return the report the CLI prints (``report.tasks``, ``report.final_ms``,
    ``report.as_json()``).

    ``model``: an ONNX file (path, bytes or ``onnx.ModelProto``) or a Relax ``IRModule`` as the importer returns it
    (not zero-pipelined; ``params`` binds its weights, every input shape must be static). ``input_shapes`` fixes an
    ONNX model's symbolic inputs: ``{"x": [1, 3, 224, 224]}`` or ``["x=1,3,224,224"]``. ``candidates``: donor
    schedules measured per task, at most (None: 3; with ``measure=False``, those the predictor ranks: 32);
    ``tune_trials``: trials for each task no donor helped (0: none), and for each transferred task whose schedule
    reached less than ``retune_below`` of its donors' best FLOP rate (0: none such);
    ``tune_budget``: seconds for the whole call, tuning taking what the transfers leave (None: no limit; 0: none);
    ``output``: where to export the compiled library; ``exact_math``: keep erf, exp, tanh and softmax exact on a CPU
    (``registry.tvm_side.compile.fast_math``); ``overlay``: an SQLite file that takes every write, ``db`` (a
    URL or path) then being only read (``registry.share.overlay``); ``verbose``: the measurement workers' own output
    (TVM's warnings and errors) on stderr, as ``-vv`` shows it. The rest is as the CLI's options of the same names.

    ``measure=False`` (``--no-measure``): nothing is timed. Each task without a record on the device gets the donor
    schedule that the device's predictor (or a sibling device's) ranks fastest among those that build; the model is
    compiled and exported, and no record is written (``registry.pipeline.predicted``). ``device``: the registry
    device to compile for, by id or name (default: this machine's for ``target``); it need not be this machine.
    """
    options = TransferOptions(
        candidates=candidates, neighbours=neighbours, tune_trials=tune_trials, tune_budget=tune_budget,
        retune_below=retune_below, measure=measure, device=device,
    )  # fmt: skip
    spec = ModelSpec(model, _input_shapes(input_shapes), params, _label(name, "name"))
    team = _label(team, "team")
    job = _Job(target, threads, db, overlay, exact_math, progress)
    if not options.measure:  # TransferOptions.measure picks the pipeline: False, the predicted one, timing nothing
        return _predicted(spec, options, _path(output), job)
    from registry.pipeline.transfer import ModelTransferOptions
    from registry.pipeline.transfer import transfer as run

    settings = ModelTransferOptions(
        candidates=options.per_task,
        neighbours=options.neighbours,
        team=team,
        output=_path(output),
        tune_trials=options.tune_trials,
        tune_seconds=options.tune_budget,
        retune_below=options.retune_below,
        where=_where(rpc, dop, verbose),
    )
    return _run(run, settings, spec, job)


def tune(
    model: ModelLike,
    *,
    input_shapes: Mapping[str, Sequence[int]] | Sequence[str] | None = None,
    params: Mapping[str, Any] | None = None,
    name: str | None = None,
    output: str | os.PathLike | None = None,
    **options: Any,
) -> ModelReport:
    """``registry tune`` from Python: tune ``model``'s tasks, seeded from the registry, every measured record written
    back at once, then compile it; returns the report the CLI prints. ``model`` and the model's arguments are as for
    ``transfer``; the tuning ``options`` are ``tune_models``'s."""
    spec = ModelSpec(model, input_shapes, params, name)
    return tune_models([spec], output=output, **options)[0]


def train_predictor(
    db: StoreLike = None,
    device: str | int = "host",
    *,
    with_devices: Sequence[str | int] = (),
    holdout: float = 0.25,
    seed: int = 0,
    kind: str | None = None,
    progress: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """``registry predictor train`` from Python: train a predictor on ``device``'s records (``"host"``, a device id or
    name; with ``with_devices``' records too), judge it on ``holdout`` of its workloads held out whole, and store it
    as the device's next version; ``kind``: one of ``registry predictor train --kind``'s (default: the ranking
    predictor's). Returns what ``--json`` prints: ``version``, ``kind``, the counts and the held-out
    scores beside a random ranking's. ``db``: a storage, a database URL or an SQLite file, which must exist (a served
    registry's URL is refused: predictors are trained where the records are, then pushed)."""
    from registry.share.remote import is_url
    from registry.store.factory import open_storage
    from registry.tvm_side import predictor, ranker

    kind = kind or ranker.KIND
    if isinstance(with_devices, (str, bytes)) or not isinstance(with_devices, Iterable):
        raise BadInputError(f"with_devices {with_devices!r}: expected a list of devices (ids or names)")
    device = device_selector("device", device)
    with_devices = [device_selector("device", d) for d in with_devices]
    opened = db is None or isinstance(db, (str, os.PathLike))
    if db is not None and opened and is_url(os.fspath(db)):
        raise BadInputError("a predictor trains on a database, not a served registry: `registry pull URL` first")
    store = open_storage(None if db is None else _url(db), create_new=False) if opened else db
    try:
        row = store.resolve_one_device(device)
        also = [store.resolve_one_device(d).id for d in with_devices]
        model, metrics = predictor.train(
            store, row.id, holdout=holdout, seed=seed, progress=progress, kind=kind, with_devices=also
        )
        return {"version": predictor.save(store, row.id, model, metrics), "kind": kind, **metrics}
    finally:
        if opened:
            store.close()


class ModelSpec(NamedTuple):
    """A model and how to load it (``load_model``'s arguments): one entry of ``tune_models``."""

    model: ModelLike
    input_shapes: Mapping[str, Sequence[int]] | Sequence[str] | None = None
    params: Mapping[str, Any] | None = None
    name: str | None = None


def tune_models(
    models: Sequence[ModelSpec | ModelLike],
    *,
    target: TargetLike = None,
    threads: int | None = None,
    db: StoreLike = None,
    overlay: str | os.PathLike | None = None,
    output: str | os.PathLike | None = None,
    trials: int | None = TUNE.trials,
    seconds: float | None = TUNE.seconds,
    predictor: bool = TUNE.predictor,
    keep: float = TUNE.keep,
    min_gain: float = TUNE.min_gain,
    min_share: float = TUNE.min_share,
    floor: int = TUNE.floor,
    batch: int = TUNE.batch,
    plateau: int = TUNE.plateau,
    retune: bool = TUNE.retune,
    lease: float = TUNE.lease,
    team: str | None = None,
    rpc: str | None = None,
    dop: int | None = None,
    verbose: bool = False,
    exact_math: bool = False,
    progress: Callable[[int, int, str], None] | None = None,
) -> list[ModelReport]:
    """``registry tune A.onnx B.onnx``: tune several models under one budget, each task once however many of them
    share it (its weight summed over them); one report per model, in order.

    ``trials`` counts measured candidates for the models' tasks, including those stored by earlier runs and those
    measured meanwhile by other runs on the same registry (so a re-run resumes, and N runs of one command divide
    the work); ``seconds`` is a wall-time budget for the whole call, compiling and timing the tuned models
    included; with neither, 32 trials per task. ``min_gain`` and ``min_share`` are percentages, as on the command
    line; ``floor`` measured candidates go to every task of at least ``min_share`` before any task gets more.
    A task whose last ``plateau`` trials gained under 1% is skipped by later runs unless ``retune``. A task this run
    tunes is leased to it until ``lease`` seconds after its last batch: other runs on the registry tune other tasks
    first, and take it over only if this run dies. ``output`` exports the library of a single model.
    """
    from registry.pipeline.tune import ModelTuneOptions, tune_models
    from registry.store.validation import MAX_LEASE_S

    real("lease", lease, 0, MAX_LEASE_S, above=True)
    options = TuneOptions(
        trials=trials, seconds=seconds, predictor=predictor, keep=keep, min_gain=min_gain, min_share=min_share,
        floor=floor, batch=batch, plateau=plateau, retune=retune, lease=lease,
    )  # fmt: skip
    settings = ModelTuneOptions.of(
        options, team=_label(team, "team"), output=_path(output), where=_where(rpc, dop, verbose)
    )
    if isinstance(models, (str, bytes, os.PathLike, ModelSpec)) or not isinstance(models, Iterable):
        raise BadInputError("models: expected a list of models (for one model, registry.tune)")
    if not models:
        raise BadInputError("no model to tune")
    specs = [m if isinstance(m, ModelSpec) else ModelSpec(m) for m in models]
    for spec in specs:
        _label(spec.name, "name")
        _input_shapes(spec.input_shapes)  # checked before any model is read
    job = _Job(target, threads, db, overlay, exact_math, progress)
    start = time.perf_counter()
    tvm_target = _target(target)
    with _opened(specs, job, start) as (loaded, store, import_s):
        return tune_models(
            store, loaded, tvm_target, _threads(threads), settings, progress=_progress(job), import_s=import_s
        )


def _predicted(spec: ModelSpec, options: TransferOptions, output: Path | None, job: _Job) -> ModelReport:
    """``transfer(measure=False)``: the predicted pipeline (``registry.pipeline.predicted``) over ``options``."""
    from registry.pipeline.predicted import PredictOptions, device_of, predict
    from registry.tvm_side.target import device_spec

    with _opened([spec], job, time.perf_counter()) as (loaded, store, import_s):
        if options.device is not None:
            device, device_id = device_of(store, options.device)
        else:
            device = device_spec(_target(job.target), _threads(job.threads))
            device_id = store.add_device(device)
        settings = PredictOptions(candidates=options.per_task, neighbours=options.neighbours, output=output)
        return predict(store, loaded[0], device, device_id, settings, _progress(job), import_s)


# -- shared ---------------------------------------------------------------------------------------------------------


class _Job(NamedTuple):
    """The arguments every model function of this module takes beside the model and its pipeline's options."""

    target: TargetLike
    threads: int | None
    db: StoreLike
    overlay: str | os.PathLike | None
    exact_math: bool
    progress: Callable[[int, int, str], None] | None


def _run(run, settings, spec: ModelSpec, job: _Job) -> ModelReport:
    """``run`` (a pipeline's entry point) over one model with its ``settings``."""
    start = time.perf_counter()
    tvm_target = _target(job.target)
    with _opened([spec], job, start) as (loaded, store, import_s):
        return run(
            store, loaded[0], tvm_target, _threads(job.threads), settings, progress=_progress(job), import_s=import_s
        )


@contextlib.contextmanager
def _opened(specs: Sequence[ModelSpec], job: _Job, start: float) -> Iterator[tuple[list[LoadedModel], Any, float]]:
    """The models loaded, the storage open (closed after, if this opened it), and the seconds since ``start``
    that the loading took (the report's import time)."""
    _threads(job.threads)  # checked before any model is read
    _db(job.db)
    if job.progress is not None and not callable(job.progress):
        raise BadInputError(f"progress: {job.progress!r} is not a function of (done, total, what)")
    loaded = [replace(load_model(*spec), exact_math=job.exact_math) for spec in specs]
    import_s = time.perf_counter() - start
    store, owned = _open(job.db, job.overlay)
    try:
        yield loaded, store, import_s
        if hasattr(store, "send_records"):  # a served registry: the run's records there before it reports
            store.send_records()
    finally:
        if owned:
            store.close()


def _progress(job: _Job) -> Callable[[int, int, str], None]:
    return job.progress or (lambda _done, _total, _what: None)


def _path(output: str | os.PathLike | None) -> Path | None:
    if output is not None and not isinstance(output, (str, os.PathLike)):
        raise BadInputError(f"output: expected a file path, got {type(output).__name__}")
    return Path(output) if output is not None else None


def _db(db: StoreLike) -> StoreLike:
    """``db`` if it is a database URL, an SQLite file or an open storage: checked before any work."""
    if db is None or isinstance(db, (str, os.PathLike)) or hasattr(db, "resolve_one_device"):
        return db
    raise BadInputError(f"db: expected a database URL, an SQLite file or an open storage, got {type(db).__name__}")


def load_model(
    model: ModelLike,
    input_shapes: Mapping[str, Sequence[int]] | Sequence[str] | None = None,
    params: Mapping[str, Any] | None = None,
    name: str | None = None,
) -> LoadedModel:
    """An ONNX file (path, bytes, ``onnx.ModelProto``) or a Relax ``IRModule`` as the pipeline takes it: ``.mod`` is
    the Relax module. An ONNX file is prepared as the CLI prepares it (its input shapes fixed, shape arithmetic that is
    constant at them folded, batch norms folded into their convolutions) before TVM's ``from_onnx`` imports it: many
    PyTorch exports import only so."""
    from tvm.ir import IRModule

    if isinstance(model, IRModule):
        if input_shapes:
            raise BadInputError("input_shapes applies to ONNX models; a Relax module's input shapes are its own")
        return _loaded_relax(model, params, name or "relax-model")
    if params is not None:
        raise BadInputError("params applies to a Relax IRModule; an ONNX model carries its weights")
    from registry.tvm_side.frontend import load_onnx
    from registry.tvm_side.onnx_prep import parse_input_shapes

    shapes = _input_shapes(input_shapes)
    if not isinstance(shapes, Mapping):
        shapes = parse_input_shapes(shapes or [])
    _label(name, "name")
    if isinstance(model, (str, os.PathLike)):
        path = Path(model)
        return load_onnx(path, shapes, name=name or path.stem)
    if isinstance(model, bytes):
        return load_onnx(model, shapes, name=name)
    if hasattr(model, "SerializeToString"):  # onnx.ModelProto
        return load_onnx(model.SerializeToString(), shapes, name=name or model.graph.name or None)
    raise BadInputError(
        f"model: expected an ONNX file (path, bytes or onnx.ModelProto) or a Relax IRModule, got {type(model).__name__}"
    )


def _loaded_relax(mod: IRModule, params: Mapping[str, Any] | None, name: str) -> LoadedModel:
    from tvm import relax

    from registry.tvm_side.frontend import LoadedModel
    from registry.tvm_side.signature import structural_hash

    if "main" not in [gv.name_hint for gv in mod.get_global_vars()]:
        raise BadInputError(f"{name}: the Relax module has no `main` function")
    if params:
        mod = relax.transform.BindParams("main", dict(params))(mod)
    func = mod["main"]
    inputs = list(func.params)
    if func.attrs is not None and "num_input" in func.attrs:  # from_onnx(keep_params_in_input=True): weights follow
        count = int(func.attrs["num_input"])
        if len(inputs) > count:
            names = ", ".join(p.name for p in inputs[count:][:3])
            raise BadInputError(f"{name}: the weights ({names}, ...) are inputs of `main`: bind them with params=")
    shapes: dict[str, list[int]] = {}
    dtypes: dict[str, str] = {}
    for param in inputs:
        ty = param.ty
        if not isinstance(ty, relax.TensorType) or not isinstance(ty.shape, relax.ShapeExpr):
            raise BadInputError(f"{name}: input {param.name} is not a tensor of known shape ({ty})")
        try:
            shapes[param.name] = [int(d) for d in ty.shape.values]
        except (TypeError, ValueError):
            raise BadInputError(
                f"{name}: input {param.name} has the symbolic shape {ty.shape}; give the module static shapes"
            ) from None
        dtypes[param.name] = str(ty.dtype)
    ident = json.dumps([structural_hash(mod), shapes], sort_keys=True)
    return LoadedModel(name, hashlib.sha256(("relax:" + ident).encode()).hexdigest(), shapes, dtypes, mod)


def _target(target: TargetLike) -> Target:
    from tvm.target import Target

    from registry.tvm_side.target import host_target as this_cpu
    from registry.tvm_side.target import target_from_option

    if target is None:
        return this_cpu()
    if isinstance(target, Target):
        return target
    if isinstance(target, dict):
        return target_from_option(json.dumps(target))
    if isinstance(target, str):
        return target_from_option(target)
    raise BadInputError(f"target: expected a tvm.target.Target, a dict, JSON text, 'host' or 'cuda', got {target!r}")


def _threads(threads: int | None) -> int | None:
    """The CLI's rule: the argument, else ``$TVM_NUM_THREADS``, else None (the runtime's default)."""
    if threads is not None:
        if whole("threads", threads, 1) > hostinfo.MAX_THREADS:
            raise BadInputError(f"threads: {threads} is not between 1 and {hostinfo.MAX_THREADS}")
        return int(threads)
    return hostinfo.env_threads()


def _label(value: Any, what: str) -> Any:
    """A team or model name as the CLI's ``--team`` and ``--name`` take it (printable text; None: none given)."""
    from registry.store.validation import name_problem

    problem = name_problem(value, what)
    if problem:
        raise BadInputError(problem)
    return value


def _input_shapes(
    input_shapes: Mapping[str, Sequence[int]] | Sequence[str] | None,
) -> Mapping[str, list[int]] | list[str] | None:
    """``input_shapes`` checked before any model is read: ``{"x": [1, 3, 224, 224]}`` (the dimensions whole and
    positive) or ``["x=1,3,224,224"]``; one string would be read a character a shape."""
    if input_shapes is None:
        return None
    if isinstance(input_shapes, Mapping):
        checked = {}
        for key, dims in input_shapes.items():
            if not isinstance(key, str) or isinstance(dims, (str, bytes)) or not isinstance(dims, Iterable):
                raise BadInputError(f"input_shapes: {key!r}: expected an input's name and its dimensions")
            dims = list(dims)
            if not all(isinstance(d, numbers.Integral) and not isinstance(d, bool) and d >= 1 for d in dims):
                raise BadInputError(f"input_shapes: {key}: {dims!r} is not a list of whole dimensions of at least 1")
            checked[key] = [int(d) for d in dims]
        return checked
    if isinstance(input_shapes, (str, bytes)) or not isinstance(input_shapes, Iterable):
        raise BadInputError(f"input_shapes: {input_shapes!r}: expected a mapping or a list of NAME=D1,D2 strings")
    return list(input_shapes)


def _store(db: StoreLike):
    """An open storage for a URL or SQLite path; None and an open storage as they are."""
    from registry.store.factory import open_storage

    if db is None or not isinstance(db, (str, os.PathLike)):
        return _db(db)
    return open_storage(_url(db))


def _url(db: str | os.PathLike) -> str:
    """A database URL, or an SQLite file's path made one."""
    text = os.fspath(db)
    return text if "://" in text else f"sqlite:///{Path(text).expanduser().resolve()}"


def _open(db: StoreLike, overlay: str | os.PathLike | None = None):
    """(storage, whether this call opened it and must close it). With ``overlay``, ``db`` is read only."""
    from registry.store.factory import open_storage

    if overlay is not None:
        if db is not None and not isinstance(db, (str, os.PathLike)):
            raise BadInputError("overlay= needs db as a URL or path (the registry is opened read-only), not a storage")
        from registry.share.overlay import open_overlay

        return open_overlay(None if db is None else _url(db), _url(overlay)), True
    if db is not None and not isinstance(db, (str, os.PathLike)):
        return db, False
    from registry.share.remote import is_url

    if db is not None and is_url(os.fspath(db)):  # a served registry: a writer's token
        from registry.share.remote import read_token
        from registry.share.served_run import open_served_run

        return open_served_run(os.fspath(db), read_token(None)), True
    return _store(db) or open_storage(None), True


def _where(rpc: str | None, dop: int | None, verbose: bool = False):
    from registry.measure.tracker import Tracker
    from registry.pipeline.model_run import Where

    if rpc is not None and not isinstance(rpc, str):
        raise BadInputError(f"rpc: expected a tracker address HOST:PORT:KEY, got {type(rpc).__name__}")
    dop = whole("dop", dop, 1, optional=True)
    return Where(rpc=Tracker.parse(rpc) if rpc else None, dop=dop, verbose=verbose)
