"""Bundles carry predictors (format version 3): each exported device's newest predictor of each kind that travels,
stored by an import as its device's next version, once per blob; hostile predictor lines refused in one line with
the registry unchanged; version 1 and 2 bundles still read. Real TVM logs, a real (tiny) XGBoost booster, real
SQLite and PostgreSQL."""

from __future__ import annotations

import base64
import hashlib
import io
import json
import shutil
import zipfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from sqlalchemy import select

from registry import hostinfo
from registry.cli.main import cli
from registry.share import bundle
from registry.store.sql.models import RegistryInfo
from registry.store.sql.store import Store
from registry.store.values import PredictorIn
from registry.tvm_side import predictor_blob
from tests.test_bad_input import Case, _bundle, refused_cleanly

pytestmark = pytest.mark.tvm

KIND = predictor_blob.KIND
# What a training stores, per_workload included (an export leaves it out: its workload ids are the sender's own).
METRICS = {
    "device": "host",
    "holdout": 0.25,
    "held_out": {"spearman": 0.5, "recall@5": 0.4, "regret@1": 1.2, "workloads": 1, "records": 4},
    "random": {"spearman": 0.0, "recall@5": 0.3, "regret@1": 1.5},
    "per_workload": [{"workload_id": 7, "task": "fused_matmul", "records": 4, "spearman": 0.5}],
}


def run(*args: str):
    return CliRunner().invoke(cli, list(args))


def ok(*args: str) -> str:
    result = run(*args)
    assert result.exit_code == 0, result.output
    return result.stdout


WIDTH = predictor_blob.PER_STORE_FEATURES  # an XGBModel's rows: MetaSchedule's per-store features


def tiny_blob(seed: int) -> bytes:
    """A real predictor blob: an XGBoost booster trained on random features of two workloads, in the stored form."""
    import xgboost as xgb

    rng = np.random.default_rng(seed)
    groups = [
        predictor_blob.Group(f"{g:032x}", [rng.random((3, WIDTH), dtype=np.float32) for _ in range(4)], costs)
        for g, costs in enumerate([rng.random(4) + 0.1, rng.random(4) + 0.1])
    ]
    x = np.concatenate([f for g in groups for f in g.features])
    y = np.concatenate([np.repeat(g.costs, 3) for g in groups])
    booster = xgb.train({"max_depth": 2, "nthread": 1}, xgb.DMatrix(x, y), num_boost_round=3)
    return predictor_blob.encode(bytes(booster.save_raw("json")), groups)


@dataclass(frozen=True)
class Source:
    url: str  # a registry of the logs' records, with one predictor on their device
    bundle: Path  # its export
    blob: bytes


_SOURCES: dict[str, Source] = {}


def _source(logs: Path, base: Path) -> Source:
    """The source registry and its bundle, made once per session (importing the logs replays every record)."""
    if str(logs) not in _SOURCES:
        folder = base / f"predictors-of-{logs.name}"
        folder.mkdir(exist_ok=True)
        url, path, blob = f"sqlite:///{folder / 'source.db'}", folder / "source.bundle", tiny_blob(0)
        ok("--db", url, "import", str(logs))
        with Store(url) as store:
            [device] = store.all_devices()
            store.save_predictor(PredictorIn(device.id, KIND, blob, METRICS, 2, 8, hostinfo.tvm_version()))
        assert "1 device(s), 0 model(s) and 1 predictor(s)" in ok("--db", url, "export", "--bundle", str(path))
        _SOURCES[str(logs)] = Source(url, path, blob)
    return _SOURCES[str(logs)]


@pytest.fixture
def source(tuned_logs, tmp_path) -> Source:
    return _source(tuned_logs.work_dir, tmp_path.parent)


def _source_bundle(env) -> Path:
    return _source(env.logs, env.tmp.parent).bundle


def make_path(url: str) -> Path:
    return Path(url.removeprefix("sqlite:///"))


def members(path: Path) -> tuple[dict, dict[str, bytes]]:
    with zipfile.ZipFile(path) as zf:
        files = {n: zf.read(n) for n in zf.namelist()}
    return json.loads(files.pop("manifest.json")), files


def predictors(url: str) -> list:
    """Every stored predictor with its blob and its device's key."""
    with Store(url) as store:
        keys = {d.id: d.key for d in store.all_devices()}
        return [
            (keys[p.device_id], store.latest_predictor(p.device_id, p.kind), p.version) for p in store.list_predictors()
        ]


def registry_id(url: str) -> str:
    with Store(url) as store, store.read() as s:
        return s.execute(select(RegistryInfo.registry_id)).scalar_one()


def test_a_predictor_travels_with_its_fields_and_is_stored_once(source, tmp_path):
    manifest, files = members(source.bundle)
    assert manifest["version"] == 3 and manifest["counts"]["predictors"] == 1 and "predictors.jsonl" in files
    dst = f"sqlite:///{tmp_path / 'fresh.db'}"
    assert "predictors: 1 new, 0 already present" in ok("--db", dst, "import", str(source.bundle))
    [(key, sent, _)] = predictors(source.url)
    [(got_key, got, version)] = predictors(dst)
    assert got_key == key and got.blob == source.blob and version == 1
    fields = lambda p: (p.kind, p.tvm_version, p.n_workloads, p.n_records)  # noqa: E731
    assert fields(got) == fields(sent) == (KIND, hostinfo.tvm_version(), 2, 8)
    # its metrics as trained, but for the sender's workload ids, naming who trained it and the blob it is
    expected = {k: v for k, v in METRICS.items() if k != "per_workload"}
    expected |= {"origin": registry_id(source.url), "blob_sha256": hashlib.sha256(source.blob).hexdigest()}
    assert got.metrics == expected
    assert "workloads_new" in json.loads(ok("--db", dst, "import", str(source.bundle), "--json"))
    # a predictor trained here since then: pulling the same bundle again still stores nothing
    with Store(dst) as store:
        store.save_predictor(PredictorIn(got.device_id, KIND, tiny_blob(1), {}, 2, 8, hostinfo.tvm_version()))
    assert "predictors: 0 new, 1 already present" in ok("--db", dst, "import", str(source.bundle))
    assert [v for _, _, v in predictors(dst)] == [1, 2]


def test_a_registry_exports_what_it_imported_with_its_origin(source, tmp_path):
    """A predictor passed on keeps the registry that trained it, and arrives back home as already there."""
    middle, last = f"sqlite:///{tmp_path / 'middle.db'}", f"sqlite:///{tmp_path / 'last.db'}"
    ok("--db", middle, "import", str(source.bundle))
    again = tmp_path / "again.bundle"
    ok("--db", middle, "export", "--bundle", str(again))
    ok("--db", last, "import", str(again))
    [(_, got, _)] = predictors(last)
    assert got.blob == source.blob and got.metrics["origin"] == registry_id(source.url) != registry_id(middle)
    home = tmp_path / "home.db"
    shutil.copy(make_path(source.url), home)
    assert "predictors: 0 new, 1 already present" in ok("--db", f"sqlite:///{home}", "import", str(again))


def test_no_predictors_leaves_them_out(source, tmp_path):
    path = tmp_path / "plain.bundle"
    out = ok("--db", source.url, "export", "--bundle", str(path), "--no-predictors")
    assert "and 0 predictor(s)" in out
    manifest, files = members(path)
    assert manifest["version"] < 3 and "predictors.jsonl" not in files and "predictors" not in manifest["counts"]
    dst = f"sqlite:///{tmp_path / 'fresh.db'}"
    assert "predictors:" not in ok("--db", dst, "import", str(path))
    assert predictors(dst) == []
    refused = run("--db", source.url, "export", "-o", str(tmp_path / "logs"), "--no-predictors")
    assert refused.exit_code == 2 and "--no-predictors is for bundles" in refused.output


def _as_version_2(path: Path, dest: Path, keep_member: bool = False) -> Path:
    """``path`` (version 3) as a version 2 bundle: the same members without predictors.jsonl."""
    manifest, files = members(path)
    manifest["version"] = 2
    if not keep_member:
        del files["predictors.jsonl"], manifest["members"]["predictors.jsonl"], manifest["counts"]["predictors"]
    with zipfile.ZipFile(dest, "w") as zf:
        for name, data in {**files, "manifest.json": json.dumps(manifest).encode()}.items():
            zf.writestr(name, data)
    return dest


def test_a_version_2_bundle_still_imports(source, tmp_path):
    v2 = _as_version_2(source.bundle, tmp_path / "v2.bundle")
    dst = f"sqlite:///{tmp_path / 'fresh.db'}"
    result = json.loads(ok("--db", dst, "import", str(v2), "--json"))
    assert result["records_new"] == members(source.bundle)[0]["counts"]["records"] > 0
    assert predictors(dst) == []
    # a version 2 bundle holds no predictors: one that does is altered
    forged = _as_version_2(source.bundle, tmp_path / "forged.bundle", keep_member=True)
    lines = run("--db", dst, "import", str(forged)).stderr.splitlines()
    assert len(lines) == 1 and "predictors.jsonl, which is no member" in lines[0]


def test_an_export_leaves_out_a_predictor_an_import_would_refuse(source, tmp_path):
    """A corrupt newest predictor costs a warning, never the export; a legacy (pickled) one never travels."""
    copy = tmp_path / "copy.db"
    shutil.copy(make_path(source.url), copy)
    url = f"sqlite:///{copy}"
    with Store(url) as store:
        [device] = store.all_devices()
        for kind, blob in ((KIND, b"PK\x03\x04 truncated"), (predictor_blob.LEGACY_KIND, b"a pickle")):
            store.save_predictor(PredictorIn(device.id, kind, blob, {}, 1, 1, hostinfo.tvm_version()))
    path = tmp_path / "out.bundle"
    result = run("--db", url, "export", "--bundle", str(path))
    assert result.exit_code == 0 and "and 0 predictor(s)" in result.stdout, result.output
    assert "predictor v2 of device" in result.stderr and "is left out of the bundle" in result.stderr
    assert "predictors.jsonl" not in members(path)[1]


# -- hostile predictor lines --------------------------------------------------------------------------------------


def _line(edit):
    """The source bundle with its predictor line edited (``edit(row)``), its checksum and count made to match."""

    def rows(rs):
        edit(rs[0])

    return _bundle(rows, member="predictors.jsonl", source=_source_bundle)


def _blob(data: bytes, sha: str | None = None):
    def edit(row):
        row["blob"], row["sha256"] = base64.b64encode(data).decode(), sha or hashlib.sha256(data).hexdigest()

    return _line(edit)


def _zip(**files: bytes) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as zf:
        for name, data in files.items():
            zf.writestr(name, data)
    return out.getvalue()


def _nested(depth: int):
    value: object = 1
    for _ in range(depth):
        value = [value]
    return value


def _metrics(**fields):
    return _line(lambda row: row["metrics"].update(fields))


def _score(value):
    return _line(lambda row: row["metrics"]["held_out"].__setitem__("spearman", value))


HOSTILE = {
    "a blob that is no predictor archive": Case(_blob(b"not a zip at all"), "is no xgb-v2 predictor"),
    "a blob whose archive lacks its booster": Case(
        _blob(_zip(**{"predictor.json": b'{"format": "registry-xgb"}'})), "is no xgb-v2 predictor"
    ),
    "a blob that is not base64": Case(_line(lambda row: row.__setitem__("blob", "!!not base64!!")), "not base64"),
    "a blob of another sha256": Case(_line(lambda row: row.__setitem__("sha256", "0" * 64)), "does not match"),
    "a sha256 that is no hash": Case(_line(lambda row: row.__setitem__("sha256", None)), "does not match"),
    "metrics of 70 KB": Case(_metrics(note="x" * 70_000), f"more than {bundle.MAX_METRICS}"),
    "metrics that are a list": Case(_line(lambda row: row.__setitem__("metrics", [1])), "not a JSON object"),
    "metrics nested 20 deep": Case(_metrics(deep=_nested(20)), "nested deeper than"),
    "a score given as text": Case(_score("0.9"), "held_out and random are not finite numbers"),
    "a score without its random counterpart": Case(
        _line(lambda row: row["metrics"]["held_out"].__setitem__("top1", 0.5)), "a random one for each"
    ),
    "an origin of markup": Case(_metrics(origin="<script>"), "not a registry id"),
    "a device index past the list": Case(_line(lambda row: row.__setitem__("device", 5)), "device index 5"),
    "a device index of -1": Case(_line(lambda row: row.__setitem__("device", -1)), "device index -1"),
    "a device index of true": Case(_line(lambda row: row.__setitem__("device", True)), "device index True"),
    "a negative count of records": Case(_line(lambda row: row.__setitem__("n_records", -1)), "records -1"),
    "a count of workloads of 2^40": Case(_line(lambda row: row.__setitem__("n_workloads", 2**40)), "workloads 1099"),
    "a count given as text": Case(_line(lambda row: row.__setitem__("n_records", "8")), "records '8'"),
    "the legacy kind": Case(_line(lambda row: row.__setitem__("kind", "xgb")), "not one a bundle carries"),
    "a TVM version with a newline": Case(
        _line(lambda row: row.__setitem__("tvm_version", "0.27\nError: forged")), "control character"
    ),
    "a field missing": Case(_line(lambda row: row.pop("metrics")), "malformed predictor"),
    "two predictors of one kind for one device": Case(
        _bundle(lambda rs: rs * 2, member="predictors.jsonl", source=_source_bundle),
        "two predictors of kind xgb-v2",
    ),
    # a bad record refuses the predictors with it: nothing is half-written
    "a record latency given as text": Case(
        _bundle(lambda rs: rs[0].__setitem__(5, ["2e-6"]), source=_source_bundle),
        "list of numbers",
    ),
}


@pytest.mark.parametrize("name", list(HOSTILE))
def test_a_hostile_predictor_is_refused_in_one_line_and_changes_nothing(name, db_url, tuned_logs, tmp_path):
    refused_cleanly(HOSTILE[name], db_url, tuned_logs.work_dir, tmp_path)


def test_a_blob_past_the_bound_is_refused(db_url, tuned_logs, tmp_path, monkeypatch):
    """The bound on a blob, lowered to just under the real one (a real 64 MiB blob would take the test minutes)."""
    size = len(_source(tuned_logs.work_dir, tmp_path.parent).blob)
    monkeypatch.setattr(bundle, "MAX_BLOB", size - 1)
    refused_cleanly(Case(_line(lambda row: None), f"{size} bytes, more than the {size - 1}"), db_url,
                    tuned_logs.work_dir, tmp_path)  # fmt: skip
    monkeypatch.setattr(bundle, "MAX_BLOB", size // 2)
    refused_cleanly(Case(_line(lambda row: None), "more than the"), db_url, tuned_logs.work_dir, tmp_path)


def test_a_device_without_records_travels_for_its_predictor_where_asked(source, tmp_path):
    """The starter bundle carries a predictor for a device class it holds no records of (bench/corpus/starter.py):
    a device keyed in ``predictor_devices`` travels with its predictor alone; otherwise only the records' devices
    do, and an import stores that device's predictor as it stores any other."""
    from registry.share.export import export_bundle
    from registry.store.rows import DeviceSpec
    from registry.store.values import ExchangeFilters
    from registry.tvm_side.target import canonical_target

    url = f"sqlite:///{tmp_path / 'source.db'}"
    shutil.copy(make_path(source.url), make_path(url))
    avx2 = {"kind": "llvm", "mcpu": "haswell", "mtriple": "x86_64-linux-gnu", "num-cores": 2}
    spec = DeviceSpec(canonical_target(avx2), 1, "an AVX2 CPU", hostinfo.tvm_version())
    with Store(url) as store:
        blob = tiny_blob(2)
        store.save_predictor(PredictorIn(store.add_device(spec), KIND, blob, {}, 2, 8, hostinfo.tvm_version()))
        plain = export_bundle(store, tmp_path / "plain.bundle", ExchangeFilters())
        carried = export_bundle(store, tmp_path / "carried.bundle", ExchangeFilters(), predictor_devices=(spec.key,))
    assert (plain.devices, plain.predictors) == (1, 1) and (carried.devices, carried.predictors) == (2, 2)
    assert carried.records == plain.records > 0
    dst = f"sqlite:///{tmp_path / 'fresh.db'}"
    assert "predictors: 2 new" in ok("--db", dst, "import", str(tmp_path / "carried.bundle"))
    got = {key: p.blob for key, p, _ in predictors(dst)}
    assert got == {key: p.blob for key, p, _ in predictors(url)} and got[spec.key] == blob
    # TVM's log format needs one device: the one with records, not the one that came for its predictor
    exported = json.loads(ok("--db", dst, "export", "-o", str(tmp_path / "logs"), "--json"))
    assert exported["records"] == plain.records and exported["device"].startswith("1:")
