"""The stored form of a predictor: data only, nothing that can run code when it is read.

XGBModel's own format (``XGBModel.save``) is a tar whose training features are a *pickled* numpy array, which
``XGBModel.load`` reads with ``allow_pickle=True``: whoever can write one row of a shared registry would run code on
every client that loads it. This format is a zip of

- ``predictor.json``: ``{"format": FORMAT, "version": VERSION, "feature_width": W, "groups": [{"hash": ..., "rows":
  [...]}, ...]}``: per workload (feature group), how many feature rows each of its records has;
- ``booster.json``: the XGBoost booster in XGBoost's own JSON model format;
- ``g<i>.features.npy`` (float32, ``sum(rows) x W``) and ``g<i>.costs.npy`` (float, one per record): plain arrays,
  read with ``allow_pickle=False``.

``decode`` checks everything before XGBoost sees it (sizes, types, tree structure), so a corrupt or crafted blob
raises BadPredictorBlob instead of reaching XGBoost's C++ parser with indices it would follow out of bounds. No TVM
here: the TVM side turns the result into an XGBModel.
"""

from __future__ import annotations

import io
import itertools
import zipfile
from dataclasses import dataclass
from typing import Any

import numpy as np
import orjson

from registry.errors import RegistryError

FORMAT = "registry-xgb"
VERSION = 2
# The ``kind`` of a stored predictor row says its format: KIND is this one; LEGACY_KIND rows hold XGBModel's own tar,
# which is never loaded again.
KIND = "xgb-v2"
LEGACY_KIND = "xgb"
# A ranking predictor (registry.tvm_side.ranker) in the same archive: no groups, rows named by the header's layout.
RANK_KIND = "xgb-rank-v1"
KINDS = (RANK_KIND, KIND)  # the kinds this registry makes and reads; the first is what training makes by default
# The rows each kind's booster reads: MetaSchedule's 164 per-store features a block (xgb-v2); those and the 7 numbers
# of the device's descriptor (xgb-rank-v1, registry.tvm_side.ranker).
PER_STORE_FEATURES = 164
RANK_LAYOUT, RANK_WIDTH = "store-blocks+device-v1", PER_STORE_FEATURES + 7
_HEADER, _BOOSTER = "predictor.json", "booster.json"
# A predictor of 10^5 records with MetaSchedule's 164 features per block row is tens of MB; 1 GiB is far beyond any
# real one and keeps a zip bomb from exhausting memory.
MAX_UNCOMPRESSED = 1 << 30
MAX_LAYOUT = 64  # a layout is a short name, e.g. "store-sum+device-v1"


class BadPredictorBlob(RegistryError):
    """A stored predictor that is not in this format, or does not hold together."""


@dataclass
class Group:
    """One workload's training data: a feature matrix per record and the record's cost."""

    hash: str
    features: list[np.ndarray]
    costs: np.ndarray


@dataclass
class Decoded:
    booster_json: bytes
    groups: list[Group]
    layout: str = ""  # the rows the booster reads, when they are not MetaSchedule's per-block features
    width: int = 0  # features a row


def encode(booster_json: bytes, groups: list[Group], *, width: int | None = None, layout: str = "") -> bytes:
    """``width``: the booster's feature count, for a predictor stored without its training groups."""
    widths = {f.shape[1] for g in groups for f in g.features} | ({width} if width is not None else set())
    if len(widths) > 1:
        raise ValueError(f"feature matrices of different widths: {sorted(widths)}")
    header = {
        "format": FORMAT,
        "version": VERSION,
        "feature_width": widths.pop() if widths else 0,
        "groups": [{"hash": g.hash, "rows": [int(f.shape[0]) for f in g.features]} for g in groups],
        **({"layout": layout} if layout else {}),
    }
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", compression=zipfile.ZIP_DEFLATED) as z:
        z.writestr(_HEADER, orjson.dumps(header))
        z.writestr(_BOOSTER, booster_json)
        for i, g in enumerate(groups):
            rows = [f.astype("float32") for f in g.features]
            width = header["feature_width"]
            z.writestr(f"g{i}.features.npy", _npy(np.concatenate(rows) if rows else np.zeros((0, width), "float32")))
            z.writestr(f"g{i}.costs.npy", _npy(np.asarray(g.costs, dtype="float64")))
    return out.getvalue()


def _npy(array: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, array, allow_pickle=False)
    return buf.getvalue()


def decode_kind(kind: str, blob: bytes) -> Decoded:
    """``decode``, and the rows ``kind``'s booster reads: a ranking predictor's layout and width without training
    groups, an XGBModel's per-block features. Raises BadPredictorBlob for a blob of another kind or none."""
    decoded = decode(blob)
    if kind == RANK_KIND:
        want = (RANK_LAYOUT, RANK_WIDTH, 0)
    elif kind == KIND:
        want = ("", PER_STORE_FEATURES, len(decoded.groups))
    else:
        raise BadPredictorBlob(f"unknown kind {kind!r}")
    got = (decoded.layout, decoded.width, len(decoded.groups))
    if got != want and not (kind == KIND and decoded.width == 0 and not decoded.groups):
        raise BadPredictorBlob(f"rows {got[:2]} with {got[2]} group(s) are not a {kind} predictor's {want[:2]}")
    return decoded


def decode(blob: bytes) -> Decoded:
    """The booster JSON and the training groups of ``blob``. Raises BadPredictorBlob for anything else."""
    try:
        with zipfile.ZipFile(io.BytesIO(blob)) as z:
            return _decode(z)
    except BadPredictorBlob:
        raise
    except (zipfile.BadZipFile, EOFError):
        raise BadPredictorBlob("not a predictor archive") from None
    except (ValueError, TypeError, KeyError, IndexError, OSError, orjson.JSONDecodeError) as e:
        # np.load refuses pickled arrays with ValueError; malformed members raise the others
        raise BadPredictorBlob(f"{type(e).__name__}: {str(e)[:160]}") from None


def _decode(z: zipfile.ZipFile) -> Decoded:
    infos = z.infolist()
    if sum(i.file_size for i in infos) > MAX_UNCOMPRESSED:
        raise BadPredictorBlob("its members would unpack to more than 1 GiB")
    names = {i.filename for i in infos}
    if _HEADER not in names or _BOOSTER not in names:
        raise BadPredictorBlob(f"{_HEADER} or {_BOOSTER} is missing")
    header = orjson.loads(z.read(_HEADER))
    if not isinstance(header, dict) or header.get("format") != FORMAT:
        raise BadPredictorBlob("not a registry predictor")
    if header.get("version") != VERSION:
        raise BadPredictorBlob(f"format version {header.get('version')!r}; this registry reads version {VERSION}")
    width = _int(header.get("feature_width"), "feature_width")
    specs = header.get("groups")
    if not isinstance(specs, list) or names != {_HEADER, _BOOSTER} | _member_names(len(specs)):
        raise BadPredictorBlob("its members do not match its header")
    layout = header.get("layout", "")
    if not isinstance(layout, str) or len(layout) > MAX_LAYOUT:
        raise BadPredictorBlob(f"layout: expected a name of at most {MAX_LAYOUT} characters")
    groups = [_group(z, i, spec, width) for i, spec in enumerate(specs)]
    booster_json = z.read(_BOOSTER)
    check_booster(orjson.loads(booster_json), width)
    return Decoded(booster_json, groups, layout, width)


def _member_names(n: int) -> set[str]:
    return {f"g{i}.{part}.npy" for i in range(n) for part in ("features", "costs")}


def _group(z: zipfile.ZipFile, i: int, spec: Any, width: int) -> Group:
    if not isinstance(spec, dict) or not isinstance(spec.get("hash"), str) or not isinstance(spec.get("rows"), list):
        raise BadPredictorBlob(f"group {i}: expected {{hash, rows}}")
    rows = [_int(r, f"group {i} rows") for r in spec["rows"]]
    if not rows:
        raise BadPredictorBlob(f"group {i}: no records")
    features = np.load(io.BytesIO(z.read(f"g{i}.features.npy")), allow_pickle=False)
    costs = np.load(io.BytesIO(z.read(f"g{i}.costs.npy")), allow_pickle=False)
    if features.dtype != np.float32 or features.shape != (sum(rows), width):
        expected = (sum(rows), width)
        raise BadPredictorBlob(f"group {i}: features of {features.dtype} {features.shape}, expected {expected}")
    if costs.dtype.kind != "f" or costs.shape != (len(rows),) or not np.all(np.isfinite(costs) & (costs > 0)):
        raise BadPredictorBlob(f"group {i}: expected {len(rows)} positive finite costs")
    return Group(spec["hash"], np.split(features, np.cumsum(rows)[:-1]), costs)


def _int(value: Any, what: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value < 1 << 31:
        raise BadPredictorBlob(f"{what}: {value!r} is not a count")
    return value


def check_booster(model: Any, width: int) -> None:
    """Refuse what XGBoost's loader would trust: trees whose child or feature indices point outside their arrays, or
    that loop back on themselves, categorical splits, and a feature count other than the features'."""
    try:
        learner = model["learner"]
        params = learner["learner_model_param"]
        booster = learner["gradient_booster"]
        trees = booster["model"]["trees"]
        if booster["name"] != "gbtree" or int(params["num_feature"]) != width:
            raise BadPredictorBlob(f"expected a gbtree booster over {width} features")
        # one score a row: a multi-class or multi-target booster answers several, which no ranking reads
        if str(params.get("num_class", "0")) not in ("0", "1") or str(params.get("num_target", "1")) != "1":
            raise BadPredictorBlob("expected one score a row (num_class 0, num_target 1)")
        if int(booster["model"]["gbtree_model_param"]["num_trees"]) != len(trees):
            raise BadPredictorBlob("its tree count does not match its trees")
        _check_tree_index(booster["model"], len(trees))
        for t, tree in enumerate(trees):
            _check_tree(t, tree, width)
    except (KeyError, TypeError, ValueError) as e:
        raise BadPredictorBlob(f"not an XGBoost tree model ({type(e).__name__}: {str(e)[:80]})") from None


def _check_tree_index(model: dict, n: int) -> None:
    """XGBoost indexes its trees by ``tree_info`` (each tree's output group) and ``iteration_indptr`` (where each
    boosting round's trees start) without checking them: a short ``tree_info`` corrupts its heap as it loads, and an
    out-of-range group writes outside its scores. One output group (0) for each of ``n`` trees, and rounds that
    start at 0, never step back and end at ``n``. Counts are plain ints (``False == 0`` in Python, not in XGBoost)."""
    info = model["tree_info"]
    if not isinstance(info, list) or len(info) != n or any(type(group) is not int or group != 0 for group in info):
        raise BadPredictorBlob(f"its tree_info is not one output group (0) for each of its {n} trees")
    indptr = model.get("iteration_indptr", [0, n])  # older XGBoost JSON has none: read as one round of every tree
    if (
        not isinstance(indptr, list)
        or not indptr
        or any(type(k) is not int for k in indptr)
        or indptr[0] != 0
        or indptr[-1] != n
        or any(k < j for j, k in itertools.pairwise(indptr))
    ):
        raise BadPredictorBlob(f"its iteration_indptr does not divide its {n} trees into rounds")


_NODE_ARRAYS = ("left_children", "right_children", "split_indices", "split_conditions", "default_left", "base_weights")


def _check_tree(t: int, tree: dict, width: int) -> None:
    # XGBoost puts each tree where its id says, unchecked: two trees of one id leave a slot empty, which it
    # dereferences when it predicts
    if type(tree.get("id")) is not int or tree["id"] != t:
        raise BadPredictorBlob(f"tree {t}: its id is not its position")
    n = int(tree["tree_param"]["num_nodes"])
    if n < 1 or any(len(tree[key]) != n for key in _NODE_ARRAYS):
        raise BadPredictorBlob(f"tree {t}: its node arrays do not have num_nodes entries")
    if any(tree.get("split_type", ())) or tree.get("categories") or tree.get("categories_nodes"):
        raise BadPredictorBlob(f"tree {t}: categorical splits are not used by MetaSchedule's model")
    left, right, feature = tree["left_children"], tree["right_children"], tree["split_indices"]
    seen, todo = set(), [0]
    while todo:  # every node reached once from the root: no cycles, no index outside the arrays
        node = todo.pop()
        if node in seen:
            raise BadPredictorBlob(f"tree {t}: node {node} is reached twice")
        seen.add(node)
        kids = (left[node], right[node])
        if kids == (-1, -1):
            continue
        inside = all(isinstance(k, int) and 0 < k < n for k in kids)
        if not inside or not isinstance(feature[node], int) or not 0 <= feature[node] < width:
            raise BadPredictorBlob(f"tree {t}: node {node} points outside the tree or the features")
        todo.extend(kids)
