"""``POST /api/v1/tasks`` and ``/api/v1/leases/*``: tuning machines that share only a server's URL divide its tasks
through it (``registry transfer|tune --db URL``: ``registry.share.served_run`` is the client).

A run names its device and its tasks' workloads once (``/tasks``: checked as a pushed bundle's are, the structural
hash recomputed here, the device rebuilt from its description; one at a time per worker, as pushes are) and gets the
server's ids for them; then it takes, renews and releases leases and records its effort by those ids, as a run on the
database itself does (``registry.pipeline.effort``). The records it measures travel as pushes (``POST
/api/v1/bundles``), "imported" here like any other.

- **Bodies are read after the token is checked**, within ``MAX_BODY`` (``/tasks``) or ``MAX_LEASE_BODY`` bytes, and
  checked against their models here: FastAPI would read and parse a declared body before any dependency ran.
- **A lease's holder is stored under its writer token** (``TAG/host:pid:random``, ``TAG`` a digest of the token's
  name, a holder's name holding no ``/``): one writer cannot renew, release or record effort under another's runs.
  The run holding a task is named to others by its token's name.
- **Effort is a writer's report**, bounded: at most ``MAX_TRIALS`` trials a batch and ``MAX_EFFORT_TRIALS`` on a task
  in all, and the effort it would make checked as its readers check a stored one (``effort_problem``). The server
  cannot check it against its records (a batch's records are pushed before it, but a curve's first point may be a
  default timed and not stored); writers are trusted to coordinate, as with leases on a shared database.
"""

from __future__ import annotations

import hashlib
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.concurrency import run_in_threadpool

from registry.server.api import known_query
from registry.server.limits import bounded_stream
from registry.server.problems import HttpProblem, responses
from registry.server.state import RequestLimits, Storage, Writer, writer
from registry.store.validation import MAX_CURVE, MAX_EFFORT_S, MAX_LEASE_S, effort_problem, name_problem
from registry.store.values import EffortUpdate, ExDevice, ExWorkload

MAX_BODY = 32 << 20  # bytes of a /tasks request: a model's workloads, each module as JSON
MAX_LEASE_BODY = 64 << 10  # bytes of a lease request: ids, a name and a curve of at most MAX_CURVE points
MAX_WORKLOADS = 2000  # workloads named at once: a model's tasks, with room to spare
MAX_MODULE = 8 << 20  # characters of one workload's module as JSON
MAX_HOLDER = 140  # characters of a run's name (registry.pipeline.effort.holder_name), before its token's tag
MAX_ID = 2**62
MAX_TRIALS = 4096  # trials one batch may add (a batch is tens)
MAX_EFFORT_TRIALS = 10**7  # trials one task's effort may reach through these routes
TAG = 12  # hex digits of a token's tag in a holder

BODY_REFUSALS = (411, 413, 422)  # what every route here may answer of its body
router = APIRouter(prefix="/api/v1", dependencies=[Depends(known_query), Depends(writer)], tags=["tuning"])


async def _body(request: Request, model: type[BaseModel], limit: int) -> Any:
    """The request's JSON body as ``model``, read after the route's dependencies (the token) and within ``limit``
    bytes, its length declared (``bounded_stream``); 422 for a body that is not the model."""
    body = b"".join([chunk async for chunk in bounded_stream(request, limit, length_required=True)])
    try:
        return model.model_validate_json(body)
    except ValidationError as e:
        first = e.errors()[0]
        where = ".".join(str(p) for p in first.get("loc", ())) or "body"
        raise HttpProblem(422, f"{where}: {first.get('msg', 'invalid')}") from None


def _documented(model: type[BaseModel]) -> dict:
    """The OpenAPI of a route's JSON body, which the route reads itself (``_body``): the model's JSON schema with its
    nested models written out in place."""
    schema = model.model_json_schema()
    defs = schema.pop("$defs", {})

    def inline(node: Any) -> Any:
        if isinstance(node, list):
            return [inline(v) for v in node]
        if not isinstance(node, dict):
            return node
        if str(node.get("$ref", "")).startswith("#/$defs/"):
            return inline(defs[node["$ref"].rsplit("/", 1)[1]])
        return {k: inline(v) for k, v in node.items()}

    return {"requestBody": {"required": True, "content": {"application/json": {"schema": inline(schema)}}}}


def _post(path: str, operation_id: str, answer: type[BaseModel], body: type[BaseModel], *statuses: int):
    """A route of this router: its answer's model, its body's documented (the route reads it: ``_body``), and the
    refusals of a body besides ``statuses``."""
    return router.post(
        path, operation_id=operation_id, response_model=answer, responses=responses(*BODY_REFUSALS, *statuses),
        openapi_extra=_documented(body),
    )  # fmt: skip


class Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


class DeviceSent(Body):
    key: str = Field(max_length=64)
    target: dict[str, Any]
    num_threads: int
    host_model: str = Field(max_length=200)
    tvm_version: str = Field(max_length=64)


class WorkloadSent(Body):
    shash: str = Field(max_length=64)
    module_equality: str = Field(max_length=64)
    mod_json: str = Field(max_length=MAX_MODULE)


class TasksIn(Body):
    device: DeviceSent
    workloads: list[WorkloadSent] = Field(max_length=MAX_WORKLOADS)


class TasksOut(Body):
    device_id: int
    workload_ids: list[int] = Field(description="The server's id of each workload, in the order sent.")


Id = Annotated[int, Field(ge=1, le=MAX_ID)]
Holder = Annotated[str, Field(min_length=1, max_length=MAX_HOLDER)]
Seconds = Annotated[float, Field(gt=0, le=MAX_LEASE_S)]


class TakeIn(Body):
    workload_id: Id
    device_id: Id
    holder: Holder
    lease_s: Seconds


class HolderIn(Body):
    holder: Holder
    lease_s: Seconds | None = None


class EffortIn(Body):
    workload_id: Id
    device_id: Id
    holder: Holder
    trials: int = Field(ge=0, le=MAX_TRIALS, description="Trials this batch adds.")
    seconds: float = Field(ge=0, lt=MAX_EFFORT_S, description="Wall seconds this batch adds.")
    curve: list[tuple[int, float]] = Field(max_length=MAX_CURVE, description="(trials, best µs), as they stand now.")
    plateau: bool
    lease_s: Seconds | None = Field(description="Renew the lease this long; null releases it.")


class TakeOut(Body):
    held_by: str | None = Field(description="The run holding the task now; null: the asking run holds it.")


class CountOut(Body):
    count: int = Field(description="How many leases the run held.")


class KeptOut(Body):
    kept: bool = Field(description="False, with nothing written, when the run no longer holds the lease.")


@_post("/tasks", "registerTasks", TasksOut, TasksIn)
async def register_tasks(request: Request, store: Storage, limits: RequestLimits) -> TasksOut:
    """The server's ids of a device and of workloads, added if new: each workload's module checked and its
    structural hash recomputed, the device rebuilt from its description, as a pushed bundle's are. A tuning run
    names its tasks here before it takes their leases."""
    sent = await _body(request, TasksIn, MAX_BODY)
    async with limits.pushing:  # a module's check replays TVM's parser: one at a time, as pushes
        return await run_in_threadpool(_register, store, sent)


def _register(store, sent: TasksIn) -> TasksOut:
    from registry.share.exchange_import import sent_device, sent_workload

    where = "the tasks"
    spec = sent_device(ExDevice(**sent.device.model_dump()), where)
    workloads = [sent_workload(ExWorkload(**w.model_dump()), where) for w in sent.workloads]
    device_id = store.add_device(spec)
    if workloads:
        store.ingest(list({w.ident: w for w in workloads}.values()), [])
    ids = store.workload_ids([w.ident for w in workloads])
    return TasksOut(device_id=device_id, workload_ids=[ids[w.ident] for w in workloads])


@_post("/leases/take", "takeLease", TakeOut, TakeIn, 404)
async def take_lease(request: Request, store: Storage, token: Writer) -> TakeOut:
    """Take or renew the lease on tuning a workload on a device for ``lease_s`` seconds."""
    sent = await _body(request, TakeIn, MAX_LEASE_BODY)
    return await run_in_threadpool(_take, store, token, sent)


def _take(store, token, sent: TakeIn) -> TakeOut:
    _known(store, sent.workload_id, sent.device_id)
    other = store.take_task(sent.workload_id, sent.device_id, _holder(token, sent.holder), sent.lease_s)
    return TakeOut(held_by=None if other is None else _shown(store, other))


@_post("/leases/renew", "renewLeases", CountOut, HolderIn)
async def renew_leases(request: Request, store: Storage, token: Writer) -> CountOut:
    """Extend every lease the run holds by ``lease_s`` seconds from now."""
    sent = await _body(request, HolderIn, MAX_LEASE_BODY)
    if sent.lease_s is None:
        raise HttpProblem(422, "lease_s: renewing needs how long")
    return CountOut(count=await run_in_threadpool(store.renew_tasks, _holder(token, sent.holder), sent.lease_s))


@_post("/leases/release", "releaseLeases", CountOut, HolderIn)
async def release_leases(request: Request, store: Storage, token: Writer) -> CountOut:
    """Release every lease the run holds (its end)."""
    sent = await _body(request, HolderIn, MAX_LEASE_BODY)
    return CountOut(count=await run_in_threadpool(store.release_tasks, _holder(token, sent.holder)))


@_post("/leases/effort", "saveEffort", KeptOut, EffortIn, 404)
async def save_effort(request: Request, store: Storage, token: Writer) -> KeptOut:
    """Add a batch's trials and seconds to a task's effort, set its curve and plateau, and renew or release its lease,
    if the run still holds it."""
    sent = await _body(request, EffortIn, MAX_LEASE_BODY)
    return await run_in_threadpool(_save, store, token, sent)


def _save(store, token, sent: EffortIn) -> KeptOut:
    """The task's effort as it would stand, checked as a stored effort is read (``effort_problem``): one that its
    readers would refuse, and so count as none, is not written."""
    now = store.efforts([sent.workload_id], sent.device_id).get(sent.workload_id)
    trials = (now.trials if now is not None else 0) + sent.trials
    seconds = (now.seconds if now is not None else 0.0) + sent.seconds
    if trials > MAX_EFFORT_TRIALS:
        raise HttpProblem(422, f"trials: the task's effort would pass {MAX_EFFORT_TRIALS:,} trials")
    problem = effort_problem(trials, seconds, sent.curve, sent.plateau)
    if problem:
        raise HttpProblem(422, f"the task's effort would be refused: {problem}")
    update = EffortUpdate(
        sent.workload_id, sent.device_id, _holder(token, sent.holder), (sent.trials, sent.seconds), sent.curve,
        sent.plateau, sent.lease_s,
    )  # fmt: skip
    return KeptOut(kept=store.save_effort(update))


def _tag(name: str) -> str:
    return hashlib.sha256(name.encode()).hexdigest()[:TAG]


def _holder(token, holder: str) -> str:
    """The run's name as stored: under its writer token's tag, printable, with no ``/`` of its own."""
    problem = name_problem(holder, "holder") or ("holder: has a '/'" if "/" in holder else None)
    if problem:
        raise HttpProblem(422, problem)
    return f"{_tag(token.name)}/{holder}"


def _shown(store, stored: str) -> str:
    """A stored holder as others see it: its token's name in place of the tag (the tag itself for a token gone)."""
    tag, sep, run = stored.partition("/")
    if not sep or len(tag) != TAG:
        return stored
    name = next((t.name for t in store.tokens() if _tag(t.name) == tag), tag)
    return f"{name[:50]}/{run}"  # within the 200 characters a client takes


def _known(store, workload_id: int, device_id: int) -> None:
    if not store.workload_hashes([workload_id]):
        raise HttpProblem(404, f"no workload {workload_id}: name it first (POST /api/v1/tasks)")
    if not any(d.id == device_id for d in store.all_devices()):
        raise HttpProblem(404, f"no device {device_id}: name it first (POST /api/v1/tasks)")
