"""A performance predictor pre-trained on a device's stored records: the One-Shot Tuner idea.

MetaSchedule's XGBModel normally starts each tuning run knowing nothing and predicts at random for its first 100
trials. Trained offline on every workload the registry has measured on a device, a predictor ranks a new workload's
candidates from the first trial, and picks among a transfer's donors. It is stored in the registry as a versioned
artifact of that device (``RegistryStorage.save_predictor``), of one of two kinds: ``xgb-rank-v1``, the ranking model
of ``registry.tvm_side.ranker`` (the default), or ``xgb-v2``, TVM's own XGBModel.

Training set: each workload with ok records on the device is one group. Its stored traces are replayed on the
workload (``apply_trace.as_stored``) and MetaSchedule extracts each block's features; the ranking model learns the
order of each group's latencies, XGBModel the latencies normalised within the group (best / latency), so that fast
and slow operators train one model.

Evaluation holds out whole workloads, not records: the question is how well the model ranks schedules of an operator
it has never seen, which is how a pre-trained model is used.
"""

from __future__ import annotations

import collections
import json
import math
import numbers
import os
import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np
from tvm.s_tir.meta_schedule import TuneContext
from tvm.s_tir.meta_schedule.arg_info import ArgInfo
from tvm.s_tir.meta_schedule.cost_model.xgb_model import FeatureGroup, XGBConfig, XGBModel
from tvm.s_tir.meta_schedule.database import Workload as TvmWorkload
from tvm.s_tir.meta_schedule.feature_extractor import PerStoreFeature
from tvm.s_tir.meta_schedule.runner import RunnerResult
from tvm.s_tir.meta_schedule.search_strategy import MeasureCandidate
from tvm.s_tir.meta_schedule.utils import shash2hex
from tvm.target import Target

from registry import hostinfo
from registry.errors import BadInputError, RegistryError, RegistryWarning
from registry.store.interface import PredictorIn, RecordWrites, RegistryReads, StoredRecord, StoredWorkload
from registry.store.values import scores_at
from registry.tvm_side import cpus, predictor_blob, ranker, tvmlog
from registry.tvm_side.apply_trace import as_stored
from registry.tvm_side.compat import load_tensor_intrinsics
from registry.tvm_side.predictor_scores import picked, random_top_k_score, spearman, top_k_recall, top_k_score
from registry.tvm_side.ranker import RankingModel
from registry.tvm_side.replay import pristine
from registry.tvm_side.target import quiet_stderr

KIND, LEGACY_KIND = predictor_blob.KIND, predictor_blob.LEGACY_KIND
KINDS = predictor_blob.KINDS
# Fewer records than this say nothing about a ranking (two records always rank "perfectly" or "inversely").
MIN_EVAL_RECORDS = 3
TOP_KS = (1, 5)


def new_model() -> XGBModel:
    """An XGBModel that predicts from its first trial, retrains on every update, and trains on this process's cores.

    ``num_warmup_samples=0``: the default (100) makes XGBModel ignore its booster and predict at random until it
    holds 100 samples, which would throw a pre-trained model away. ``adaptive_training=False``: with it, a model
    loaded with thousands of samples would not retrain until the new workload added 20% more, i.e. never in a short
    tuning run, and the new workload's own measurements are the most telling ones.
    """
    return XGBModel(
        config=XGBConfig(nthread=xgboost_threads()),
        num_warmup_samples=0,
        adaptive_training=False,
        verbose_eval=0,  # XGBModel logs boosting rounds at multiples of it (round 0 too), and its early stop, unless 0
    )


def xgboost_threads() -> int:
    """``$OMP_NUM_THREADS`` when set, else every core this process may use.

    TVM's runtime pins this thread to one core once its thread pool starts, so the affinity from before TVM loaded
    is the one that counts. The variable is for shared machines: with another job busy on one of the cores, training
    on all of them takes several times as long as on one (docs/BENCHMARKS.md, "Evidence behind the code's rules"), as
    XGBoost's OpenMP threads wait at every barrier for the one that is not running.
    """
    env = os.environ.get("OMP_NUM_THREADS", "")
    if env.isdigit() and int(env) > 0:
        return int(env)
    return cpus.count()


# -- the training set ------------------------------------------------------------------------------------------


@dataclass
class WorkloadRows:
    """One workload's stored row and ok records, as the storage gives them."""

    workload_id: int
    task: str
    workload: StoredWorkload
    records: list[StoredRecord]


@dataclass
class WorkloadGroup:
    """One workload's records, as features for XGBModel and latencies for the evaluation."""

    workload_id: int
    task: str
    context: TuneContext
    group_hash: str
    features: list[np.ndarray]  # one per record, fastest first
    run_secs: list[list[float]]
    mean_s: np.ndarray
    candidates: list[MeasureCandidate] | None = None  # kept only while needed (they hold a module per record)
    skipped: int = 0

    @property
    def costs(self) -> np.ndarray:
        """XGBModel's cost of each record: the median of its run_secs (``XGBModel.update`` takes the same)."""
        return np.array([np.median(s) for s in self.run_secs], dtype="float32")


class TrainingSource:
    """Reads one device's workloads and records from the store and turns them into TVM objects."""

    def __init__(self, store: RegistryReads, device_id: int) -> None:
        self.store, self.device_id = store, device_id
        device = store.resolve_one_device(str(device_id))
        self.device_name = f"{device.id}:{device.name}"
        try:  # a crafted or foreign row: its device is named, not TVM's message about it
            with quiet_stderr():
                self.target = Target(json.loads(device.target_json))
        except Exception:  # noqa: BLE001 - TVM raises its own errors for a target it refuses
            raise BadInputError(f"device {self.device_name}: its stored target is not one this TVM takes") from None
        self.threads = device.num_threads
        # workload id -> (task name, ok records)
        self.counts: dict[int, tuple[str, int]] = store.ok_record_counts(device_id)

    def rows(self, workload_id: int) -> WorkloadRows:
        """The workload and its ok records, fastest first: the storage reads, made in the calling thread."""
        task, n = self.counts[workload_id]
        stored = self.store.workloads_by_id([workload_id])[workload_id]
        return WorkloadRows(workload_id, task, stored, self.store.top_k(workload_id, self.device_id, n))

    def group(self, rows: WorkloadRows, threads: int, extractor: PerStoreFeature | None = None) -> WorkloadGroup:
        """``rows`` as TVM objects and features: each trace replayed on the workload and MetaSchedule's per-block
        features (``extractor``'s, default ``PerStoreFeature()``) extracted on ``threads`` threads. No storage
        access, so any thread may call it (TVM releases the GIL while it replays and extracts)."""
        stored, records = rows.workload, rows.records
        mod = TvmWorkload.from_json([stored.shash, tvmlog.encode_module(stored.mod_json)]).mod
        args_info = [ArgInfo.from_json(a) for a in stored.args_info]
        context = TuneContext(mod=mod, target=self.target, task_name=rows.task, num_threads=threads)
        base = pristine(mod)
        candidates, kept = [], []
        for r in records:
            sch = as_stored(mod, json.loads(r.trace_json), base)
            if sch is not None:  # None: written by a TVM whose instructions no longer replay
                candidates.append(MeasureCandidate(sch, args_info))
                kept.append(r)
        # a new one by default: nothing says a TVM extractor may serve two threads at once
        extractor = extractor or PerStoreFeature()
        features = [x.numpy().astype("float32") for x in extractor.extract_from(context, candidates)] if kept else []
        # As XGBModel.update does: a schedule without features cannot be trained on.
        keep = [i for i, f in enumerate(features) if len(f)]
        return WorkloadGroup(
            workload_id=rows.workload_id,
            task=rows.task,
            context=context,
            group_hash=shash2hex(mod),
            features=[features[i] for i in keep],
            run_secs=[kept[i].run_secs for i in keep],
            mean_s=np.array([kept[i].mean_s for i in keep]),
            candidates=[candidates[i] for i in keep],
            skipped=len(records) - len(keep),
        )

    def groups(self, workload_ids: list[int]) -> Iterator[WorkloadGroup]:
        """``group`` of each workload, in order, without its schedules (they hold a module each), on every core this
        process may use: a thread per core replays and extracts one workload at a time (about twice as fast on 2
        cores as one thread), while this thread reads the next workloads' rows, a few workloads ahead at most."""
        workers = cpus.count()
        threads = max(1, workers // max(1, len(workload_ids)))  # fewer workloads than cores: each extracts on more

        def build(rows: WorkloadRows) -> WorkloadGroup:
            try:
                g = self.group(rows, threads)
            except Exception as e:
                e.add_note(f"while reading workload {rows.workload_id} ({rows.task})")
                raise
            g.candidates = None
            return g

        pool = ThreadPoolExecutor(workers, thread_name_prefix="registry-features", initializer=cpus.unpin)
        try:
            ahead: collections.deque[Future[WorkloadGroup]] = collections.deque()
            for wid in workload_ids:
                ahead.append(pool.submit(build, self.rows(wid)))
                if len(ahead) > workers + 2:
                    yield ahead.popleft().result()
            while ahead:
                yield ahead.popleft().result()
        finally:  # an error or an interrupt: what is queued is dropped, not replayed first
            pool.shutdown(wait=True, cancel_futures=True)


def _fit(groups: list[WorkloadGroup], anchor: WorkloadGroup) -> XGBModel:
    """A new model trained once on all ``groups``.

    Calling ``update`` once per workload would retrain XGBoost from scratch after each one (XGBModel always trains
    on everything it holds): quadratic in the number of workloads. So every other group is put in the model's data
    as ``update`` itself would store it, and one ``update`` with ``anchor`` (which still has its candidates) extracts
    that group and trains on them all, XGBModel normalising each group by its own best.
    """
    model = new_model()
    for g in groups:
        if g is not anchor:
            model.data[g.group_hash] = FeatureGroup(g.group_hash, list(g.features), g.costs)
            model.data_size += len(g.features)
    model.update(anchor.context, anchor.candidates, [RunnerResult(s, None) for s in anchor.run_secs])
    return model


def _fit_ranking(training: list[tuple[TrainingSource, list[WorkloadGroup]]], ranks_for: TrainingSource) -> RankingModel:
    """A ranking model (``registry.tvm_side.ranker``) trained once on each source's groups, each workload of each
    device one query with that device's descriptor, ranking for ``ranks_for``'s device."""
    queries = []
    for reading, groups in training:
        device = ranker.descriptor(reading.target, reading.threads)
        queries += [(g.features, g.mean_s, device) for g in groups]
    booster = ranker.fit(queries, nthread=xgboost_threads())
    return RankingModel(booster, ranks_for.target, ranks_for.threads, nthread=xgboost_threads())


# -- evaluation ------------------------------------------------------------------------------------------------


def _scores(model: XGBModel | RankingModel, g: WorkloadGroup) -> np.ndarray:
    """The model's score of each of the group's programs, from the features already extracted: what ``predict``
    gives, without extracting them again."""
    if isinstance(model, RankingModel):
        return ranker.program_scores(model.booster, g.features, model.device)
    return np.asarray(model._predict(xs=g.features))  # XGBModel.predict past its extraction


def _evaluate(model: XGBModel | RankingModel, g: WorkloadGroup) -> dict[str, Any]:
    score = _scores(model, g)
    throughput = 1.0 / g.mean_s
    row: dict[str, Any] = {"workload_id": g.workload_id, "task": g.task, "records": len(g.mean_s)}
    row["spearman"] = spearman(score, throughput)
    # TenSet's top-k scores (the best latency over the best of the k ranked highest), a random ranking's expected ones
    for k in TOP_KS:
        row[f"top{k}"] = top_k_score(g.mean_s, score, k)
        row[f"random_top{k}"] = random_top_k_score(g.mean_s, k)
    for k in TOP_KS:
        row[f"recall@{k}"] = top_k_recall(score, throughput, k)
        # A random ranking's expected recall: each of the k picks is one of the true k with probability k/n.
        row[f"random_recall@{k}"] = min(k, len(throughput)) / len(throughput)
    # Top-1 regret: how much slower the predicted best is than the best measured (what a pick without measurement
    # costs), and a random pick's, in expectation.
    best = float(g.mean_s.min())
    row["regret@1"] = float(g.mean_s[picked(g.mean_s, score)[0]]) / best - 1
    row["random_regret@1"] = float(np.mean(g.mean_s)) / best - 1
    return row


def _summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    def mean(key: str) -> float:
        return float(np.mean([r[key] for r in rows]))

    return {
        "held_out": {
            "spearman": mean("spearman"),
            **{f"top{k}": mean(f"top{k}") for k in TOP_KS},
            **{f"recall@{k}": mean(f"recall@{k}") for k in TOP_KS},
            "regret@1": mean("regret@1"),
        },
        # A random ranking's Spearman is 0 in expectation; its recall is k/n, averaged like the model's.
        "random": {
            "spearman": 0.0,
            **{f"top{k}": mean(f"random_top{k}") for k in TOP_KS},
            **{f"recall@{k}": mean(f"random_recall@{k}") for k in TOP_KS},
            "regret@1": mean("random_regret@1"),
        },
        "per_workload": rows,
    }


# -- training --------------------------------------------------------------------------------------------------


def _split(source: TrainingSource, holdout: float, seed: int) -> tuple[list[int], list[int]]:
    """Workload ids to train on and to hold out. Only workloads with enough records to rank are held out."""
    ids = list(source.counts)
    if not ids:
        raise RegistryError(
            f"device {source.device_name} has no ok records: training needs at least 1 workload with records "
            "(tune or import some first)"
        )
    if holdout == 0:
        return ids, []
    rankable = [w for w in ids if source.counts[w][1] >= MIN_EVAL_RECORDS]
    if len(ids) < 2 or not rankable:
        raise RegistryError(
            f"device {source.device_name} has {len(ids)} workload(s) with ok records, {len(rankable)} of them with "
            f"{MIN_EVAL_RECORDS}+ records: a held-out evaluation needs at least 2 workloads, one of them with "
            f"{MIN_EVAL_RECORDS}+ records (or train without one: --holdout 0)"
        )
    n_held = min(max(1, round(holdout * len(ids))), len(rankable), len(ids) - 1)
    rng = np.random.default_rng(seed)
    held = sorted(rng.choice(rankable, size=n_held, replace=False).tolist())
    return [w for w in ids if w not in held], held


def _split_choice(holdout: Any, seed: Any) -> tuple[float, int]:
    """``holdout`` and ``seed`` as plain numbers, checked before any work: both are stored as JSON with the predictor,
    and a seed of None would draw a held-out share no one could draw again."""
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral) or seed < 0:
        raise BadInputError(f"seed {seed!r}: expected a whole number, 0 or more")
    real = isinstance(holdout, numbers.Real) and not isinstance(holdout, bool)
    if not (real and math.isfinite(holdout) and 0 <= holdout < 1):
        raise BadInputError(f"holdout {holdout!r}: expected a fraction of the workloads, at least 0 and below 1")
    return float(holdout), int(seed)


def train(
    store: RegistryReads,
    device_id: int,
    *,
    holdout: float = 0.25,
    seed: int = 0,
    held_out: list[int] | None = None,
    progress: Callable[[str], None] | None = None,
    kind: str = ranker.KIND,
    with_devices: Sequence[int] = (),
) -> tuple[XGBModel | RankingModel, dict[str, Any]]:
    """Train a predictor of ``kind`` on every workload of ``device_id``; first evaluate one trained without
    ``holdout`` of them (a share, drawn with ``seed``), or without the workloads whose ids ``held_out`` names.

    ``with_devices``: other devices (of the same target kind) whose records it trains on too, each program's rows
    carrying its own device's descriptor (a ranking predictor only). The held-out workloads are held out of every
    device's records, so the evaluation still judges operators the model never saw, on ``device_id``.

    Returns the model trained on all workloads, and metrics: counts (``skipped_records``: traces that no longer
    replay), seconds (trace replay and feature extraction included), and (with ``holdout`` > 0) TenSet's top-1/top-5
    scores, the mean Spearman correlation, top-1/top-5 recall and top-1 regret on held-out workloads next to a random
    ranking's, with each workload's; with ``with_devices``, what it was trained on (``trained_on``).
    Raises RegistryError when a device has too few workloads or records, BadInputError for ``with_devices`` that
    cannot train with ``device_id``.
    """
    holdout, seed = _split_choice(holdout, seed)
    if kind not in KINDS:
        raise BadInputError(f"unknown predictor kind {kind!r}; expected one of {', '.join(KINDS)}")
    say = progress or (lambda _msg: None)
    source = TrainingSource(store, device_id)
    others = _other_sources(store, source, with_devices, kind)
    if held_out is None:
        train_ids, held_ids = _split(source, holdout, seed)
    else:
        if not set(held_out) < set(source.counts):
            raise BadInputError(f"held_out {held_out}: not a proper subset of the workloads {sorted(source.counts)}")
        train_ids, held_ids = [w for w in source.counts if w not in held_out], list(held_out)
    load_tensor_intrinsics(source.target.kind.name)  # before the first TuneContext, which would import them all

    start = time.perf_counter()
    total, done, skipped = len(source.counts) + sum(len(other.counts) for other in others), 0, 0

    def read(reading: TrainingSource, ids: list[int]) -> Iterator[WorkloadGroup]:
        nonlocal done, skipped
        for g in reading.groups(ids):
            done += 1
            say(f"[{done}/{total}] {g.task}" + (f" ({reading.device_name})" if others else ""))
            skipped += g.skipped
            yield g

    groups = [g for g in read(source, train_ids) if g.features]
    if not groups:
        raise RegistryError(
            f"no record of device {source.device_name} reads back whole and replays on this TVM ({skipped} did not"
            " replay; rows refused as they were read are warned of): nothing to train on"
        )
    if kind == KIND:  # XGBModel's _fit extracts its anchor's schedules again: the one group that keeps them
        groups[-1] = source.group(source.rows(groups[-1].workload_id), cpus.count())
    anchor = groups[-1]
    # The other devices' records of the held-out workloads are held out with them (an operator the model never saw),
    # and read after the evaluation for the stored model, which trains on everything.
    elsewhere = [(other, [g for g in read(other, [w for w in other.counts if w not in held_ids]) if g.features])
                 for other in others]  # fmt: skip

    def fit(training: list[WorkloadGroup]) -> XGBModel | RankingModel:
        return _fit(training, anchor) if kind == KIND else _fit_ranking([(source, training), *elsewhere], source)

    metrics: dict[str, Any] = {"device": source.device_name, "holdout": holdout, "seed": seed}
    if held_ids:
        partial = fit(groups)
        rows = []
        for g in read(source, held_ids):
            if len(g.features) >= MIN_EVAL_RECORDS:
                rows.append(_evaluate(partial, g))
            if g.features:
                groups.append(g)
        if rows:  # else the held-out workloads' records did not replay: no evaluation to show
            metrics.update(_summary(rows))
            metrics["held_out"].update(workloads=len(rows), records=sum(r["records"] for r in rows))
    for other, more in elsewhere:
        more += [g for g in read(other, [w for w in held_ids if w in other.counts]) if g.features]
    model = fit(groups)
    every = groups + [g for _, more in elsewhere for g in more]
    metrics.update(
        workloads=len({g.workload_id for g in every}),
        records=sum(len(g.features) for g in every),
        skipped_records=skipped,
        train_seconds=round(time.perf_counter() - start, 3),
    )
    if others:  # as the starter bundle's predictors name theirs (``predictor list``'s "trained on")
        names = " + ".join(s.device_name.split(":", 1)[1] for s in [source, *others])
        metrics["trained_on"] = f"{names} ({metrics['records']} programs)"
    return model, metrics


def _other_sources(
    store: RegistryReads, source: TrainingSource, device_ids: Sequence[int], kind: str
) -> list[TrainingSource]:
    """The devices ``train`` trains on besides ``source``'s, each checked: a ranking predictor (its rows say which
    device each program ran on; TVM's XGBModel's do not), the same target kind (a GPU's features mean other things
    than a CPU's), another device than the rest, and ok records."""
    if not device_ids:
        return []
    if kind != ranker.KIND:
        raise BadInputError(
            f"training on other devices' records too needs kind {ranker.KIND}: {kind} rows do not say which device a "
            "program ran on"
        )
    ids = [source.device_id, *device_ids]
    if (twice := next((d for d in ids if ids.count(d) > 1), None)) is not None:
        raise BadInputError(f"device {twice} is named twice: each device's records train once")
    others = [TrainingSource(store, d) for d in device_ids]
    for other in others:
        if other.target.kind.name != source.target.kind.name:
            raise BadInputError(
                f"device {other.device_name} is a {other.target.kind.name} target and {source.device_name} a "
                f"{source.target.kind.name} one: one predictor ranks one kind of target"
            )
        if not other.counts:
            raise RegistryError(f"device {other.device_name} has no ok records to train on")
    return others


# -- storing ----------------------------------------------------------------------------------------------------


def to_bytes(model: XGBModel | RankingModel) -> bytes:
    """The model as ``registry.tvm_side.predictor_blob`` stores it: the booster as XGBoost JSON, and for an XGBModel
    its training features as arrays (a ranking model grows from its booster alone: ``RankingModel.update``)."""
    booster_json = bytes(model.booster.save_raw("json"))
    if isinstance(model, RankingModel):
        return predictor_blob.encode(booster_json, [], width=model.booster.num_features(), layout=ranker.LAYOUT)
    groups = [predictor_blob.Group(g.group_hash, g.features, g.costs) for g in model.data.values()]
    return predictor_blob.encode(booster_json, groups)


def _booster(decoded: predictor_blob.Decoded):
    import xgboost as xgb

    booster = xgb.Booster()
    try:
        booster.load_model(bytearray(decoded.booster_json))
    except xgb.core.XGBoostError as e:
        raise predictor_blob.BadPredictorBlob(f"XGBoost refused its booster ({str(e).strip()[-160:]})") from None
    return booster


def from_bytes(blob: bytes) -> XGBModel:
    """The inverse of ``to_bytes``, as a model that predicts from its first trial (see ``new_model``).

    Built here field by field, never through ``XGBModel.load``, which unpickles. Raises BadPredictorBlob for a blob
    that is not one (XGBoost's own refusals included).
    """
    decoded = predictor_blob.decode_kind(KIND, blob)
    model = new_model()
    model.booster = _booster(decoded)
    for g in decoded.groups:
        model.data[g.hash] = FeatureGroup(g.hash, g.features, g.costs)
        model.data_size += len(g.costs)
    return model


def ranking_from_bytes(blob: bytes, target: Target, threads: int) -> RankingModel:
    """A stored ranking predictor, ranking for the device ``target`` and ``threads`` describe (its descriptor goes
    into every row, so one booster ranks for each device it is loaded for). Raises BadPredictorBlob as
    ``from_bytes`` does, and for rows of another layout."""
    booster = _booster(predictor_blob.decode_kind(ranker.KIND, blob))
    model = RankingModel(booster, target, threads, nthread=xgboost_threads())
    probe = model.booster.predict(_zeros_row())
    if probe.shape != (1,) or not np.isfinite(probe).all():  # one finite score a row, or it ranks nothing
        raise predictor_blob.BadPredictorBlob(f"it scores a row as {probe.shape} values, not one finite number")
    return model


def _zeros_row():
    import xgboost as xgb

    return xgb.DMatrix(np.zeros((1, ranker.ROW_WIDTH), np.float32))


def save(store: RecordWrites, device_id: int, model: XGBModel | RankingModel, metrics: dict[str, Any]) -> int:
    """Store ``model`` as the device's next predictor version; returns the version."""
    if model.booster is None:
        raise RegistryError("the model was never trained: there is nothing to store")
    ranking = isinstance(model, RankingModel)
    return store.save_predictor(
        PredictorIn(
            device_id,
            ranker.KIND if ranking else KIND,
            to_bytes(model),
            metrics,
            n_workloads=int(metrics["workloads"]) if ranking else len(model.data),
            n_records=int(metrics["records"]) if ranking else int(model.data_size),
            tvm_version=hostinfo.tvm_version(),
        )
    )


def load_predictor(
    store: RegistryReads, device_id: int, for_device: int | None = None
) -> tuple[XGBModel | RankingModel, int] | None:
    """The device's newest predictor and its version, ready to rank candidates for ``for_device`` (default: the same
    device; a ranking predictor describes the device it ranks for in every row); None when it has none.

    A predictor that cannot be used is not fatal: tuning goes on with a fresh model after one RegistryWarning, which
    says why. That covers a blob in the old format (XGBModel's tar, whose pickled features could run code on this
    machine: never opened) and one that does not decode. Use it as the cost model of a tuning run on the same
    device, e.g. ``ms.tune_tir(..., cost_model=load_predictor(store, device_id)[0])``.
    """
    stored = store.latest_predictor(device_id)
    if stored is None:
        return None
    if stored.kind == LEGACY_KIND:
        problem = "is in the old format, whose pickled features could run code here, so it is not loaded"
    else:
        try:
            if stored.kind == KIND:
                return from_bytes(stored.blob), stored.version
            if stored.kind == ranker.KIND:
                row = {d.id: d for d in store.all_devices()}[device_id if for_device is None else for_device]
                model = ranking_from_bytes(stored.blob, Target(json.loads(row.target_json)), row.num_threads)
                return model, stored.version
            raise predictor_blob.BadPredictorBlob(f"unknown kind {stored.kind!r}")
        except predictor_blob.BadPredictorBlob as e:
            problem = f"cannot be read ({e})"
    warnings.warn(
        f"predictor v{stored.version} of device {stored.device_id}:{stored.device} {problem}; tuning goes on "
        f"without it; retrain it with `registry predictor train --device {stored.device_id}`",
        RegistryWarning,
        stacklevel=2,
    )
    return None


def sibling_predictor(store: RegistryReads, device_id: int) -> tuple[XGBModel | RankingModel, int, str] | None:
    """For a device with no predictor of its own: the predictor of a sibling (another device of its target kind and
    TVM release: another mcpu, thread count or GPU), one of its class first (``ranker.device_class``), then the one
    trained on the most records, with its version and device; None when no sibling has one. A sibling's ranking of
    schedules carries over better than none: what makes a loop nest fast on one x86 core (vector width aside) or one
    NVIDIA GPU mostly makes it fast on the next."""
    devices = {d.id: d for d in store.all_devices()}
    own = devices.get(device_id)
    kind = _target_kind(own.target_json) if own is not None else None
    if kind is None:
        return None
    siblings = [
        p
        for p in store.list_predictors()
        if p.device_id != device_id
        and p.kind in KINDS
        and p.device_id in devices
        and devices[p.device_id].tvm_version == own.tvm_version
        and _target_kind(devices[p.device_id].target_json) == kind
    ]
    # A ranking predictor first (it ranks for this device with this device's descriptor), then one of this device's
    # class (the same vector width or GPU arch: ranker.device_class), then the one trained on the most records.
    own_class = _device_class(own.target_json)
    same = {p.device_id: _device_class(devices[p.device_id].target_json) == own_class for p in siblings}
    for info in sorted(
        siblings, key=lambda p: (p.kind != ranker.KIND, not same[p.device_id], -p.n_records, -p.version)
    ):
        loaded = load_predictor(store, info.device_id, for_device=device_id)
        if loaded is not None and loaded[1] == info.version:
            return loaded[0], info.version, f"{info.device_id}:{info.device}"
    return None


@dataclass
class LoadedPredictor:
    """A predictor ready to rank for one device, with what it was trained and judged on."""

    model: XGBModel | RankingModel
    version: int
    metrics: dict[str, Any]  # its training's (``train``): held-out scores, when it was judged
    sibling: str | None = None  # "id:name" of the device it was trained on, when not the device it ranks for

    def warranted(self, most: int) -> int:
        """How many of a task's ranked candidates to measure, at most ``most``: 1 where the predictor's held-out
        top-1 score reached ``CONFIDENT`` (its pick is within 5% of the best, on average, on workloads it never
        saw), else ``most``. A predictor judged on nothing earns no trust, and neither does one judged on another
        device (a sibling's, or one trained on other devices' programs: ``trained_on``)."""
        top1 = scores_at(self.metrics, "held_out").get("top1")
        elsewhere = self.sibling is not None or "trained_on" in self.metrics
        confident = top1 is not None and top1 >= CONFIDENT
        return 1 if confident and not elsewhere else most


def scores_of(model: XGBModel | RankingModel, mod, target: Target, task_name: str, schedules: list) -> np.ndarray:
    """The predictor's score of each scheduled ``mod`` (higher: predicted faster), from the scheduled TIR alone."""
    return np.asarray(model.predict(*ranking_inputs(mod, target, task_name, schedules)))


def ranking_inputs(mod, target: Target, task_name: str, schedules: list) -> tuple[TuneContext, list]:
    """What a MetaSchedule cost model ranks ``schedules`` of workload ``mod`` from: its tuning context and the
    schedules as candidates."""
    context = TuneContext(mod=mod, target=target, task_name=task_name)
    args = ArgInfo.from_prim_func(next(iter(mod.functions.values())))
    return context, [MeasureCandidate(sch, args) for sch in schedules]


# The held-out top-1 score above which a transfer measures only the predictor's pick (see LoadedPredictor.warranted).
CONFIDENT = 0.95


def predictor_for(store: RegistryReads, device_id: int) -> LoadedPredictor | None:
    """The device's own newest predictor, else a sibling device's (``sibling_predictor``), else None."""
    loaded = load_predictor(store, device_id)
    sibling = None
    if loaded is None:
        found = sibling_predictor(store, device_id)
        if found is None:
            return None
        loaded, sibling = found[:2], found[2]
    trained_on = device_id if sibling is None else int(sibling.split(":", 1)[0])
    info = {p.version: p for p in store.list_predictors(trained_on)}.get(loaded[1])
    return LoadedPredictor(loaded[0], loaded[1], info.metrics if info is not None else {}, sibling)


def _device_class(target_json: str) -> str | None:
    """A stored device's class (``ranker.device_class``); None for a target TVM does not take (what LLVM prints of it
    goes nowhere: the row may be anyone's)."""
    try:
        with quiet_stderr():
            return ranker.device_class(Target(json.loads(target_json)))
    except Exception:  # noqa: BLE001 - a crafted row's target: TVM raises its own errors for what it refuses
        return None


def _target_kind(target_json: str) -> str | None:
    """A stored device's target kind; None for a target that does not parse (a crafted row is no one's sibling)."""
    try:
        spec = json.loads(target_json)
    except ValueError:
        return None
    return spec.get("kind") if isinstance(spec, dict) else None
