"""The JSON that ``--json`` (or ``--format json``) prints: one pydantic model per command, each with a
``schema_version``.

The version changes only when a field is removed, renamed or changes meaning; new fields may appear in any release
(models marked "open" below already carry more fields than they list). docs/JSON.md is generated from these models:

    .venv/bin/python -m registry.schemas > docs/JSON.md

(a test checks that it is current). Imported only when JSON is asked for: a table needs no pydantic.
"""

from __future__ import annotations

import json
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field

SCHEMA_VERSION = 1


class Output(BaseModel):
    """What every command's JSON has: the version of its shape."""

    model_config = ConfigDict(extra="forbid")
    command: ClassVar[str] = ""
    schema_version: int = Field(SCHEMA_VERSION, description="Version of this JSON shape (see docs/JSON.md).")


class Open(BaseModel):
    """A shape that may carry more fields than it lists (the pipeline's own reports)."""

    model_config = ConfigDict(extra="allow")


# -- lookup -------------------------------------------------------------------------------------------------------


class Argument(Open):
    shape: list[int]
    dtype: str


class LookupEntry(BaseModel):
    model_config = ConfigDict(extra="forbid")
    workload: str = Field(description="Structural hash of the workload.")
    op: str = Field(description="Operator kind: conv2d, matmul, ...")
    task: str = Field(description="Task name of the workload.")
    args: list[Argument] = Field(description="Argument shapes and dtypes.")
    flops: float
    device_id: int
    device: str
    threads: int = Field(description="Runtime threads the record was measured with.")
    rank: int = Field(description="1 for the best record of this (workload, device), 2 for the next, ...")
    record_id: int
    latency_us: float = Field(description="Mean measured latency, microseconds.")
    gflops: float
    records: int = Field(description="Ok records of this (workload, device).")
    source: str = Field(description="tuned, transferred or imported.")
    team: str | None
    model: str | None
    created_at: str
    trust: str = Field(description="measured (by this registry), imported, verified or disputed.")
    origin: str = Field(description='The id of the registry that measured it, or "tvm-log" for a TVM log.')
    verified_latency_us: float | None = Field(description="What `registry verify` measured here (null: not yet).")
    effort_trials: int | None = Field(
        None, description="Trials `registry tune` runs measured on this workload and device (null: none recorded)."
    )
    effort_s: float | None = Field(None, description="Their wall seconds.")
    plateau: bool | None = Field(
        None, description="Whether the search reached a plateau (its last trials gained under 1%); later runs skip it."
    )


class LookupOutput(Output):
    command: ClassVar[str] = "lookup"
    rows: list[LookupEntry]


# -- stats, devices -----------------------------------------------------------------------------------------------


class DeviceCount(BaseModel):
    id: int
    name: str
    tuned_workloads: int
    ok_records: int


class TeamCount(BaseModel):
    team: str | None = Field(description="The team the records were tagged with (null: none).")
    records: int
    last_at: str | None = Field(description="When its newest record arrived (ISO 8601, UTC).")


class StatsOutput(Output):
    command: ClassVar[str] = "stats"
    database: str = Field(description="The database URL, password hidden.")
    devices: int
    workloads: int
    records: int
    records_ok: int
    models: int
    records_by_source: dict[str, int]
    workloads_by_op: dict[str, int]
    per_device: list[DeviceCount]
    by_team: list[TeamCount] = Field(description="Records per team, the team whose records arrived last first.")


class DeviceEntry(BaseModel):
    id: int
    name: str
    kind: str
    mcpu: str | None
    num_cores: int | None
    threads: int
    host_model: str
    tvm_version: str
    records: int
    target: dict[str, Any] = Field(description="The device's full TVM target, as JSON.")


class DevicesOutput(Output):
    command: ClassVar[str] = "devices"
    rows: list[DeviceEntry]


# -- import, export, db, index ------------------------------------------------------------------------------------


class ImportOutput(Output):
    command: ClassVar[str] = "import"
    workloads_new: int
    workloads_present: int
    records_new: int
    records_present: int
    records_skipped: int = Field(description="Invalid records left out (--skip-invalid).")
    first_skipped: str | None = Field(description="Where and why the first skipped record was refused.")
    predictors_new: int = Field(0, description="A bundle's predictors stored as their devices' next versions.")
    predictors_present: int = Field(0, description="A bundle's predictors whose blob the device already held.")


class ExportOutput(Output):
    command: ClassVar[str] = "export"
    folder: str
    device: str
    workloads: int
    records: int
    plain_kernels: int = Field(
        description="Kernels that plain TVM extracts from a stored model differently from the registry, without a "
        "record of their own on the device."
    )
    plain_records: int = Field(description="Of those, how many got the registry's schedule replayed on them.")
    plain_unusable: list[str] = Field(description="The task names of the rest: plain TVM keeps its defaults there.")


class BundleOutput(Output):
    command: ClassVar[str] = "export --bundle"
    path: str
    origin: str = Field(description="The id of the registry that wrote it.")
    created_at: str
    devices: int
    workloads: int
    records: int
    models: int
    predictors: int = Field(0, description="Predictors it carries (the newest of each kind of each device).")
    bytes: int


class ShippedBundle(BaseModel):
    name: str
    path: str
    records: int
    workloads: int
    models: int
    created_at: str
    bytes: int


class PullListOutput(Output):
    command: ClassVar[str] = "pull --list"
    rows: list[ShippedBundle]


class SyncOutput(Output):
    command: ClassVar[str] = "sync"
    source: str = Field(description="The source registry's URL, password hidden.")
    destination: str
    incremental: bool = Field(description="Whether an earlier sync of this pair and filter set was continued.")
    records_read: int = Field(description="Records read from the source (those above the last sync's).")
    records_new: int
    records_present: int = Field(description="Records the destination held already (same schedule and origin).")
    records_skipped: int = Field(description="Invalid records left out (--skip-invalid).")
    workloads_new: int
    models: int
    seconds: float


class VerifyRow(BaseModel):
    model_config = ConfigDict(extra="forbid")
    record_id: int
    workload: str = Field(description="Structural hash of the workload.")
    task: str
    claimed_us: float = Field(description="The record's claimed mean latency, microseconds.")
    measured_us: float | None = Field(description="The mean measured here (null: it did not build or run).")
    ratio: float | None = Field(description="measured_us / claimed_us.")
    verdict: str = Field(description="verified or disputed: the record's trust now.")
    reason: str | None = Field(description="Why disputed (slower than claimed, failed to build, failed to run).")


class VerifyOutput(Output):
    """What `registry verify` re-measured, one row per record, and how fast."""

    command: ClassVar[str] = "verify"
    devices: list[str] = Field(description="The devices verified here.")
    tolerance: float = Field(description="Disputed when measured > claimed x tolerance.")
    verified: int
    disputed: int
    left_elsewhere: dict[str, int] = Field(
        description="Imported records of matching devices that this machine is not, by device name: not verified."
    )
    seconds: float
    records_per_s: float
    rows: list[VerifyRow]

    @classmethod
    def of(cls, result, tolerance: float) -> VerifyOutput:
        """From a ``registry.share.verify.VerifyResult``."""
        rows = [
            VerifyRow(record_id=r.record_id, workload=r.workload, task=r.task, claimed_us=r.claimed_us,
                      measured_us=r.measured_us, ratio=r.ratio, verdict=r.verdict, reason=r.reason)
            for r in result.records
        ]  # fmt: skip
        return cls(devices=result.devices, tolerance=tolerance, verified=result.count("verified"),
                   disputed=result.count("disputed"), left_elsewhere=result.left_elsewhere, seconds=result.seconds,
                   records_per_s=result.records_per_s, rows=rows)  # fmt: skip


class CheckOutput(Output):
    """What `registry check` replayed, and the records that do not replay on their workload."""

    command: ClassVar[str] = "check"
    checked: int = Field(description="Records replayed.")
    not_replaying: dict[str, int] = Field(description="Records that do not replay on their workload, by device name.")
    first: str | None = Field(description="The first of them: record id, device and why.")
    marked: bool = Field(description="Whether they were marked disputed (false with --dry-run).")
    seconds: float

    @classmethod
    def of(cls, result) -> CheckOutput:
        """From a ``registry.records.audit.AuditResult``."""
        return cls(checked=result.checked, not_replaying=result.not_replaying, first=result.first,
                   marked=result.marked, seconds=result.seconds)  # fmt: skip


class DbOutput(Output):
    command: ClassVar[str] = "db upgrade, db current"
    database: str = Field(description="The database URL, password hidden.")
    before: str | None = Field(None, description="db upgrade: the revision before (null: empty database).")
    revision: str | None = Field(description="The database's schema revision now (null: empty database).")
    head: str = Field(description="The revision this registry needs.")
    up_to_date: bool


class GrantOutput(Output):
    """What `registry db grant` granted, or with --print-sql would grant (granted: false)."""

    command: ClassVar[str] = "db grant"
    database: str = Field(description="The database URL, password hidden.")
    role: str
    access: str = Field(description="read-only or writer.")
    schema_name: str = Field(description="The PostgreSQL schema of the registry's tables.")
    owner: str | None = Field(description="The role that owns the registry's tables (null with --print-sql).")
    sql: str = Field(description="The statements, one per line.")
    granted: bool = Field(description="False with --print-sql: the statements were printed, not run.")


class IndexStatusOutput(Output):
    command: ClassVar[str] = "index status, index rebuild"
    path: str
    exists: bool
    in_sync: bool
    indexed: int = Field(description="Workloads in the saved index.")
    expected: int = Field(description="Workloads with good records in the database.")
    built_at: str | None


# -- predictors ---------------------------------------------------------------------------------------------------


class PredictorTrainOutput(Output, Open):
    """Open: the training's metrics (held_out, random, per_workload, ...) as registry.tvm_side.predictor reports."""

    command: ClassVar[str] = "predictor train"
    model_config = ConfigDict(extra="allow")
    version: int
    kind: str
    device: str
    workloads: int
    records: int
    skipped_records: int
    train_seconds: float
    trained_on: str | None = Field(
        None, description="With --with-device: every device it trained on, and the programs in all (null without)."
    )


class PredictorEntry(BaseModel):
    id: int
    device_id: int
    device: str
    version: int
    kind: str
    tvm_version: str
    n_workloads: int
    n_records: int
    metrics: dict[str, Any]
    blob_bytes: int
    created_at: str | None


class PredictorListOutput(Output):
    command: ClassVar[str] = "predictor list"
    rows: list[PredictorEntry]


# -- transfer, tune -----------------------------------------------------------------------------------------------


class Task(Open):
    """One task of the model. ``trials`` counts measured candidates (as every table does); ``proposed`` counts the
    candidates the search proposed, including those the predictor dropped unmeasured."""

    name: str
    weight: int
    workload_id: int
    source: str = Field(description="exact, transferred, tuned, default or failed.")
    before_us: float | None
    after_us: float | None
    donor: str | None
    distance: float | None
    of_donor_rate: float | None = Field(
        None,
        description="FLOP rate the transferred schedule reached here, as a share of the best rate its donors' own "
        "records reached (records searched for, not transferred ones). Under transfer's --retune-below, the task was "
        "tuned further.",
    )
    candidates: int = Field(
        description="Candidate schedules measured for this task (donors or tuning); with --no-measure, those the "
        "predictor ranked (donor programs, or samples of its design spaces)."
    )
    trials: int = Field(description="Tuning trials: candidates measured by this run's tuning.")
    proposed: int = Field(0, description="Candidates the tuner proposed, measured or dropped by the predictor.")
    tune_s: float
    stopped: str | None
    error: str | None
    effort_trials: int | None = Field(
        None, description="Trials every `registry tune` run measured on this task and device (null: none recorded)."
    )
    effort_s: float | None = Field(None, description="Their wall seconds.")
    plateau: bool | None = Field(None, description="Whether its search reached a plateau; later runs skip it.")


class ModelReportOutput(Output, Open):
    """Open: the report of registry.report.model_report.ModelReport.as_json (timings, tuning, ...)."""

    command: ClassVar[str] = "transfer, tune"
    model_config = ConfigDict(extra="allow")
    model: str
    device: str
    threads: int
    untuned_ms: float | None
    final_ms: float | None
    speedup: float | None
    search_s: float
    sources: dict[str, int]
    output: str | None
    tasks: list[Task]
    errors: list[str]


class ModelReportList(Output):
    """`registry tune A.onnx B.onnx --json`: one report per model, in the order given."""

    command: ClassVar[str] = "tune with several models"
    reports: list[ModelReportOutput]


# -- show ---------------------------------------------------------------------------------------------------------


class ShowOutput(Output):
    command: ClassVar[str] = "show"
    workload: str
    task: str
    op: str
    device_id: int
    device: str
    record_id: int
    latency_us: float
    source: str
    donor_record_id: int | None = Field(description="The record a transferred schedule came from.")
    donor: str | None = Field(description="The donor's workload hash and device, for a transferred record.")
    team: str | None
    model: str | None
    created_at: str
    tvmscript: str = Field(description="The scheduled PrimFunc, as TVMScript.")
    trace: str = Field(description="The schedule's trace, as Python.")


# -- report -------------------------------------------------------------------------------------------------------


class ReportOutput(Output):
    """Where `registry report` wrote the model's HTML page, and what it covers."""

    command: ClassVar[str] = "report"
    model: str
    device: str | None = Field(description="The device whose records the page draws.")
    path: str
    tasks: int
    tasks_with_records: int


# -- registry serve: the JSON API's own shapes (lookup, stats, devices and import are the CLI's above) -----------------


class ServerInfoOutput(Output):
    """``GET /api/v1/registry``: which registry answers, and what it runs."""

    command: ClassVar[str] = "serve: GET /api/v1/registry"
    registry_id: str = Field(description="The registry's id: the origin of the records it measured.")
    schema_revision: str | None
    tool_version: str
    tvm_version: str
    public: bool = Field(description="Whether it lets a request without a token read.")
    role: str | None = Field(description="The role of the token that asked (null: none, on a public server).")


class ModelEntry(BaseModel):
    id: int
    name: str
    sha256: str
    input_shapes: dict[str, list[int]] | None = Field(
        description="Each input's shape (null: the stored shapes are unreadable, a row written around the registry)."
    )
    created_at: str | None


class ModelsOutput(Output):
    """``GET /api/v1/models``: the models recorded by transfer, tune or a bundle, newest first."""

    command: ClassVar[str] = "serve: GET /api/v1/models"
    rows: list[ModelEntry]


class ReportTask(BaseModel):
    name: str
    workload_id: int
    weight: int
    source: str = Field(description="tuned, transferred, imported, or none.")
    donor: str | None
    distance: float | None
    before_us: float | None
    after_us: float | None
    records: int
    curve: list[tuple[float, float]] = Field(description="(seconds since the first record, best µs so far).")
    share: float | None = Field(description="Share of the model's estimated latency, 0..1.")


class ModelReportData(Output):
    """``GET /api/v1/models/{name}``: what `registry report` draws for a model, as data."""

    command: ClassVar[str] = "serve: GET /api/v1/models/{name}"
    model: str
    model_id: int
    sha256: str
    input_shapes: str
    device: str | None
    generated_at: str
    start: str | None
    span_s: float
    tasks: list[ReportTask]
    model_curve: list[tuple[float, float]] = Field(description="(seconds, Σ weight × best µs so far).")
    before_kind: str
    notes: list[str]


class RecordOutput(Output):
    """``GET /api/v1/records/{id}``: one record with its provenance and trace (as stored, JSON)."""

    command: ClassVar[str] = "serve: GET /api/v1/records/{id}"
    record_id: int
    workload: str
    device_id: int
    latency_us: float
    run_secs: list[float]
    source: str
    donor_record_id: int | None
    donor: str | None
    team: str | None
    model: str | None
    host: str | None
    tvm_version: str
    created_at: str
    trace: Any = Field(description="[instructions, decisions], as MetaSchedule writes a trace.")


class ExchangeOutput(Output):
    """``GET /api/v1/exchange``: where a pull of these filters stands; the pages come from ``/exchange/bundle``."""

    command: ClassVar[str] = "serve: GET /api/v1/exchange"
    origin: str = Field(description="The serving registry's id.")
    filters_key: str = Field(description="Identifies the filter set in the puller's sync progress.")


class SyncStateOutput(Output):
    """``GET /api/v1/sync-state``: how far pushes from one registry with one filter set have come."""

    command: ClassVar[str] = "serve: GET /api/v1/sync-state"
    last_record_id: int


class TokenEntry(BaseModel):
    name: str
    role: str
    created_at: str | None
    revoked_at: str | None
    expires_at: str | None = Field(None, description="When the server stops admitting it (null: never).")


class TokenListOutput(Output):
    """``registry token list`` and ``GET /api/v1/tokens`` (admin): the tokens, never their secrets."""

    command: ClassVar[str] = "token list"
    rows: list[TokenEntry]


class TokenCreateOutput(Output):
    """``registry token create``: the token, shown this once."""

    command: ClassVar[str] = "token create"
    name: str
    role: str
    token: str


class TokenRevokeOutput(Output):
    """``registry token revoke``: the token refused from now on."""

    command: ClassVar[str] = "token revoke"
    name: str


class ReleaseLeasesOutput(Output):
    """``registry db release-leases``: the leases released, and those left to runs that may still be running."""

    command: ClassVar[str] = "db release-leases"
    released: int
    left: dict[str, int] = Field(description="Leases left, by the run holding them (--force releases them).")


class ServeOutput(Output):
    """``registry serve --json``: printed once the server is about to listen, before it serves."""

    command: ClassVar[str] = "serve"
    url: str = Field(description="Where it listens.")
    database: str = Field(description="The registry it serves, password hidden.")
    public: bool
    workers: int


class PushOutput(ImportOutput):
    """``registry push URL`` and ``registry pull URL``: what the records' import counted, over every page."""

    command: ClassVar[str] = "push"
    url: str
    incremental: bool = Field(
        description="Whether an earlier pull or push with these filters let this one skip records."
    )
    pages: int
    records_read: int
    models: int
    seconds: float


OUTPUTS: list[type[Output]] = [
    LookupOutput,
    StatsOutput,
    DevicesOutput,
    ImportOutput,
    ExportOutput,
    BundleOutput,
    SyncOutput,
    PullListOutput,
    VerifyOutput,
    CheckOutput,
    DbOutput,
    GrantOutput,
    ReleaseLeasesOutput,
    IndexStatusOutput,
    PredictorTrainOutput,
    PredictorListOutput,
    ModelReportOutput,
    ShowOutput,
    ReportOutput,
    ServerInfoOutput,
    ModelsOutput,
    ModelReportData,
    RecordOutput,
    ExchangeOutput,
    SyncStateOutput,
    TokenListOutput,
    TokenCreateOutput,
    TokenRevokeOutput,
    ServeOutput,
    PushOutput,
]


def markdown() -> str:
    """docs/JSON.md: one section per command, with its model's JSON schema."""
    lines = [
        "# JSON output",
        "",
        "<!-- generated by `python -m registry.schemas > docs/JSON.md`; do not edit -->",
        "",
        "Every command prints one JSON object with `--json` (`--format json` where `--format` exists). Each carries",
        f"`schema_version` (now {SCHEMA_VERSION}): it changes only when a field is removed, renamed or changes "
        "meaning;",
        "new fields may appear in any release. Lists of rows are under `rows`. The shapes are the pydantic models of",
        "`registry/schemas.py`; their JSON schemas follow.",
        "",
    ]
    for model in OUTPUTS:
        lines += [f"## `registry {model.command}` — {model.__name__}", ""]
        doc = (model.__doc__ or "").strip()
        if doc and model.__doc__ != Output.__doc__:
            lines += [" ".join(doc.split()), ""]
        lines += ["```json", json.dumps(model.model_json_schema(), indent=2), "```", ""]
    return "\n".join(lines)


if __name__ == "__main__":
    print(markdown(), end="")
