"""``POST /api/v1/tasks`` and ``/api/v1/leases/*``: tuning machines that share only a server's URL divide its tasks
through it (``registry transfer|tune --db URL``: ``registry.share.served_run`` is the client).

A run names its device and its tasks' workloads once (``/tasks``: checked as a pushed bundle's are, the structural
hash recomputed here, the device rebuilt from its description) and gets the server's ids for them; then it takes,
renews and releases leases and records its effort by those ids, as a run on the database itself does
(``registry.pipeline.effort``). The records it measures travel as pushes (``POST /api/v1/bundles``), "imported" here
like any other.

A lease's holder is stored under the writer token's name (``alice/host:pid:random``): one writer cannot renew,
release or record effort under another's runs, and the name says whose run holds a task. Every number is bounded as
an effort from another registry is (``registry.store.validation``); a writer's token is needed for all of it.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request
from pydantic import BaseModel, ConfigDict, Field

from registry.server.api import known_query
from registry.server.problems import HttpProblem, responses
from registry.server.state import Storage, Writer, writer
from registry.store.validation import MAX_CURVE, MAX_EFFORT_S, MAX_LEASE_S, curve_problem, name_problem
from registry.store.values import EffortUpdate, ExDevice, ExWorkload

MAX_BODY = 32 << 20  # bytes of one request: a model's workloads, each module as JSON
MAX_WORKLOADS = 2000  # workloads named at once: a model's tasks, with room to spare
MAX_MODULE = 8 << 20  # characters of one workload's module as JSON
MAX_HOLDER = 140  # characters of a run's name (registry.pipeline.effort.holder_name), before the token's name
MAX_ID = 2**62
MAX_TRIALS = 1 << 20  # trials one batch may add


async def bounded_body(request: Request) -> None:
    """Refuses a body that does not declare its length (411) or declares more than ``MAX_BODY`` (413), before FastAPI
    reads it."""
    declared = request.headers.get("content-length")
    if declared is None or not declared.isdigit():
        raise HttpProblem(411, "the request must declare its Content-Length")
    if int(declared) > MAX_BODY:
        raise HttpProblem(413, f"the request declares {int(declared):,} bytes; this route takes at most {MAX_BODY:,}")


BODY_REFUSALS = (411, 413, 422)  # what every route here may answer of its body
router = APIRouter(
    prefix="/api/v1", dependencies=[Depends(known_query), Depends(writer), Depends(bounded_body)], tags=["tuning"]
)


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


@router.post(
    "/tasks", operation_id="registerTasks", response_model=TasksOut, responses=responses(*BODY_REFUSALS),
)  # fmt: skip
def register_tasks(store: Storage, sent: TasksIn) -> TasksOut:
    """The server's ids of a device and of workloads, added if new: each workload's module checked and its
    structural hash recomputed, the device rebuilt from its description, as a pushed bundle's are. A tuning run
    names its tasks here before it takes their leases."""
    from registry.share.exchange_import import sent_device, sent_workload

    where = "the tasks"
    spec = sent_device(ExDevice(**sent.device.model_dump()), where)
    workloads = [sent_workload(ExWorkload(**w.model_dump()), where) for w in sent.workloads]
    device_id = store.add_device(spec)
    if workloads:
        store.ingest(list({w.ident: w for w in workloads}.values()), [])
    ids = store.workload_ids([w.ident for w in workloads])
    return TasksOut(device_id=device_id, workload_ids=[ids[w.ident] for w in workloads])


@router.post("/leases/take", operation_id="takeLease", response_model=TakeOut, responses=responses(*BODY_REFUSALS, 404))
def take_lease(store: Storage, token: Writer, sent: TakeIn) -> TakeOut:
    """Take or renew the lease on tuning a workload on a device for ``lease_s`` seconds."""
    _known(store, sent.workload_id, sent.device_id)
    return TakeOut(held_by=store.take_task(sent.workload_id, sent.device_id, _holder(token, sent.holder), sent.lease_s))


@router.post("/leases/renew", operation_id="renewLeases", response_model=CountOut, responses=responses(*BODY_REFUSALS))
def renew_leases(store: Storage, token: Writer, sent: HolderIn) -> CountOut:
    """Extend every lease the run holds by ``lease_s`` seconds from now."""
    if sent.lease_s is None:
        raise HttpProblem(422, "lease_s: renewing needs how long")
    return CountOut(count=store.renew_tasks(_holder(token, sent.holder), sent.lease_s))


@router.post(
    "/leases/release", operation_id="releaseLeases", response_model=CountOut, responses=responses(*BODY_REFUSALS)
)
def release_leases(store: Storage, token: Writer, sent: HolderIn) -> CountOut:
    """Release every lease the run holds (its end)."""
    return CountOut(count=store.release_tasks(_holder(token, sent.holder)))


@router.post(
    "/leases/effort", operation_id="saveEffort", response_model=KeptOut, responses=responses(*BODY_REFUSALS, 404)
)
def save_effort(store: Storage, token: Writer, sent: EffortIn) -> KeptOut:
    """Add a batch's trials and seconds to a task's effort, set its curve and plateau, and renew or release its lease,
    if the run still holds it."""
    problem = curve_problem(sent.curve, MAX_ID)  # the task's trials in all, every run's: the store's to add up
    if problem:
        raise HttpProblem(422, f"curve: {problem}")
    update = EffortUpdate(
        sent.workload_id, sent.device_id, _holder(token, sent.holder), (sent.trials, sent.seconds), sent.curve,
        sent.plateau, sent.lease_s,
    )  # fmt: skip
    return KeptOut(kept=store.save_effort(update))


def _holder(token, holder: str) -> str:
    """The run's name as stored: under its writer token's name, printable."""
    problem = name_problem(holder, "holder")
    if problem:
        raise HttpProblem(422, problem)
    return f"{token.name[:50]}/{holder}"


def _known(store, workload_id: int, device_id: int) -> None:
    if not store.workloads_by_id([workload_id]):
        raise HttpProblem(404, f"no workload {workload_id}: name it first (POST /api/v1/tasks)")
    if not any(d.id == device_id for d in store.all_devices()):
        raise HttpProblem(404, f"no device {device_id}: name it first (POST /api/v1/tasks)")
