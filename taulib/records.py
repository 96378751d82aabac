"""The shapes of tau's main records as typed dictionaries, checked against the schemas by tests/test_records.py.

Each TypedDict mirrors one object of a schema in share/schemas (named beside it): the same keys and required keys,
and the Python type of each JSON type (string str, integer int, number float, boolean bool, null None, array list,
fixed properties a TypedDict, free keys dict[str, ...], enum and const Literal). The schemas stay the contract:
records are validated against them on every write and read, and these shapes follow them. An executor's name is
`ExecutorName` (str): nothing outside taulib.executors spells the executors' names.

Reads nothing, writes nothing: declarations only.
"""

# no `from __future__ import annotations`: Python 3.11 would count every key of a class TypedDict required
from typing import Literal, NotRequired, TypedDict

ExecutorName = str  # one of taulib.executors.EXECUTORS (the schemas' executor enums are checked against the table)
Format = Literal["parquet", "csv", "jsonl"]  # common.schema.json $defs/format
ObservedState = Literal["pending", "running", "completed", "failed", "cancelled", "timed_out", "node_failed",
                        "out_of_memory", "preempted", "requeued"]  # common.schema.json $defs/observed_state
DeploymentState = Literal["pending", "starting", "ready", "failed", "stopped", "restarting"]
SourceState = Literal["observed", "unavailable"]

# -- common.schema.json: the small objects in a line or two each, the larger ones as classes ------------------------

# $defs/ref: a record named by its path in the run directory and the sha256 of its canonical bytes
Ref = TypedDict("Ref", {"path": str, "sha256": str})
# $defs/scheduler_identity: the scheduler's name for one task
SchedulerIdentity = TypedDict("SchedulerIdentity", {"executor": ExecutorName, "job_id": str, "task_index": int})
# $defs/output_schema's items: one column of the output schema
OutputColumn = TypedDict("OutputColumn", {"name": str, "type": str})
# $defs/service_ready, its oneOf in order: a GET answers 2xx, the port takes a connection, a command exits 0
HttpProbe = TypedDict("HttpProbe", {"expect": NotRequired[str], "http": str})
TcpProbe = TypedDict("TcpProbe", {"tcp": Literal[True]})
CommandProbe = TypedDict("CommandProbe", {"command": list[str]})
ServiceReady = HttpProbe | TcpProbe | CommandProbe
# $defs/missing_shards' items: a shard a collection left out, and its state and reason then
MissingShard = TypedDict("MissingShard", {"reason": str, "shard_id": str, "state": Literal[
    "candidate", "running", "accounting_lag", "pending", "unknown", "failed", "exhausted", "cancelled"]})


# $defs/windows: how long tau waits before it believes what it sees, in seconds
Windows = TypedDict("Windows", {
    "accounting_lag_seconds": int, "heartbeat_seconds": NotRequired[int], "preemption_seconds": int,
    "progress_stall_seconds": NotRequired[int | None], "stall_action": NotRequired[Literal["report", "stop"]],
    "stall_seconds": NotRequired[int], "submission_visibility_seconds": int})


Mount = TypedDict("Mount", {"container": str, "host": str, "writable": bool})  # a host path bound inside an image
# $defs/image: an image pinned by digest, the runtime that runs it, its flags and mounts
Image = TypedDict("Image", {"digest": str, "file": str | None, "mounts": list[Mount], "ref": str | None,
                            "runtime": str, "runtime_args": list[str], "runtime_command": list[str],
                            "workdir": str | None})


class Service(TypedDict):  # $defs/service: a model service started beside the client, as the plan resolves it
    backends: int
    command: list[str]
    env: dict[str, str]
    gpus: int
    image: NotRequired[Image]
    name: str
    ports: list[int] | None
    probe_failures: int
    probe_seconds: int
    ready: ServiceReady
    start_timeout: int
    stop_grace: int


# $defs/usage_figures: what one finished task used, as its executor measured it
UsageFigures = TypedDict("UsageFigures", {
    "cpu_seconds": float, "cpus": int, "elapsed_seconds": float, "gpus": int, "max_rss_bytes": int | None,
    "mem_requested_bytes": int | None, "source": Literal["sacct", "rusage"], "state": str, "task_index": int,
    "time_limit_seconds": float | None})


# -- plan.schema.json -----------------------------------------------------------------------------------------------

SiteRef = TypedDict("SiteRef", {"name": str, "sha256": str})  # site: the profile merged in, by name and digest
# collection: where a collection may write, where its job runs, whether the user's group may read its dataset
PlanCollection = TypedDict("PlanCollection", {
    "allowed_roots": list[str], "group_readable": NotRequired[bool], "image": NotRequired[Literal["host", "client"]]})
# retry.escalate: how a retry's request grows after memory (mem) or time ran out: factors, and caps
Escalate = TypedDict("Escalate", {"max_mem": str, "max_time": str, "mem": float, "time": float}, total=False)


class PlanOutput(TypedDict):  # output: the dataset's format and partitions
    format: Format
    keep_input: NotRequired[list[str]]
    rows_per_partition: int
    schema: NotRequired[list[OutputColumn] | None]
    tasks: NotRequired[int]


PlanInput = TypedDict("PlanInput", {"format": Literal["parquet", "csv", "jsonl"], "path": str, "piece_bytes": int})


class PlanRetry(TypedDict):  # retry: the attempt budget
    escalate: NotRequired[Escalate]
    max_attempts: int
    max_failed_attempts: int
    max_failed_fraction: float


class LocalSection(TypedDict):  # scheduler.local: the local executor's section
    gpus: NotRequired[list[str]]
    max_parallel: int
    mem: NotRequired[str]
    time_limit: NotRequired[int | str]


SlurmSection = TypedDict("SlurmSection", {  # scheduler.slurm: the Slurm executor's section (every key optional)
    "account": str, "collect_mem": str, "collect_partition": str, "collect_time": str, "cpus_per_task": int,
    "extra": list[str], "gpu_option": Literal["gpus-per-task", "gres"], "gpu_type": str, "gpus": int,
    "max_parallel": int, "max_queued": int, "mem": str, "partition": str, "qos": str, "time": str}, total=False)


class Scheduler(TypedDict):  # scheduler: the executor chosen (profile) and every executor's section
    local: LocalSection
    profile: ExecutorName
    slurm: SlurmSection


class Plan(TypedDict):
    """plan.schema.json: the resolved plan of a run (RUN/plan.json, immutable)."""

    collection: PlanCollection
    command: list[str]
    env: dict[str, str]
    image: NotRequired[Image]
    inherit_env: NotRequired[list[str]]
    input: NotRequired[PlanInput]
    kind: Literal["tau.plan"]
    output: PlanOutput
    records: int
    resume: Literal["never", "always"]
    retry: NotRequired[PlanRetry]
    run_id: str
    scheduler: Scheduler
    schema_version: Literal[1]
    services: NotRequired[list[Service]]
    shard_count: int
    site: NotRequired[SiteRef]
    shard_size: int | None
    windows: Windows


# -- attempt.schema.json --------------------------------------------------------------------------------------------

# terminal: how an attempt ended
Terminal = TypedDict("Terminal", {"classification": Literal[
    "succeeded", "failed", "cancelled", "timed_out", "node_failed", "out_of_memory", "preempted", "unknown",
    "completed_unfinalised", "fenced"], "exit_code": int | None, "reason": str,
    "code": NotRequired[Literal["image_changed", "input_changed", "input_unreadable"]]})


class Attempt(TypedDict):
    """attempt.schema.json: one try of one shard (shards/SHARD/attempts/ATTEMPT/attempt.json)."""

    attempt_id: str
    created_at: str
    dataset: str
    kind: Literal["tau.attempt"]
    ordinal: int
    plan_sha256: str
    restarts: int
    revision: int
    run_id: str
    scheduler: SchedulerIdentity
    schema_version: Literal[1]
    shard_id: str
    started_at: str | None
    state: Literal["submitted", "running", "succeeded", "failed"]
    submission_id: str
    terminal: Terminal | None
    updated_at: str
    windows: Windows


# -- submission-plan.schema.json and submission-status.schema.json --------------------------------------------------

# adopt_from: the run whose winners an adoption (tau-init --from) copies
AdoptFrom = TypedDict("AdoptFrom", {"plan_sha256": str, "run_dir": str, "run_id": str})
# grant: what a person granted with tau-retry (only what was granted is present)
Grant = TypedDict("Grant", {"mem": NotRequired[str | None], "time": NotRequired[str | None]})
# resources: what each task of the window asks for
Resources = TypedDict("Resources", {"mem": str | None, "time": str | None})
Capacity = TypedDict("Capacity", {  # capacity: what the scheduler allowed when the window was planned
    "holding": str | None, "least": int | None, "max_index": int | None, "max_tasks": int | None,
    "room": int | None, "unread": list[str]})


class TaskRange(TypedDict):  # task_ranges' items: consecutive shards with one ordinal (this version of tau)
    count: int
    first: int
    granted: NotRequired[Literal[True]]
    ordinal: int
    task: NotRequired[int]


class PlannedTask(TypedDict):  # tasks' items: one task, as earlier versions of tau wrote them
    attempt_id: str
    granted: NotRequired[bool]
    ordinal: int
    shard_id: str
    task_index: int


class SubmissionPlan(TypedDict):
    """submission-plan.schema.json: what one submission submits (submissions/SUBMISSION/plan.json). The widest
    shape: the schema's oneOf asks for exactly one of `tasks` (earlier versions) and `task_ranges` (this one)."""

    adopt_from: NotRequired[AdoptFrom]
    capacity: NotRequired[Capacity]
    created_at: str
    executor: ExecutorName
    grant: NotRequired[Grant]
    job_name: str
    kind: Literal["tau.submission-plan"]
    plan_sha256: str
    purpose: Literal["initial", "retry", "adopt"]
    resources: NotRequired[Resources]
    run_id: str
    schema_version: Literal[1]
    submission_id: str
    task_ranges: NotRequired[list[TaskRange]]
    tasks: NotRequired[list[PlannedTask]]


class SubmissionStatus(TypedDict):
    """submission-status.schema.json: the journal of one submission (submissions/SUBMISSION/status.json)."""

    deadline: str
    job_id: str | None
    kind: Literal["tau.submission-status"]
    plan: Ref
    reason: str | None
    revision: int
    run_id: str
    schema_version: Literal[1]
    state: Literal["prepared", "submitted", "failed"]
    submission_id: str
    updated_at: str


# -- observations.schema.json ---------------------------------------------------------------------------------------

# attempts' sources: the sources for one attempt whose own rows could not be read, and why
AttemptSources = TypedDict("AttemptSources", {"accounting": SourceState, "queue": SourceState, "reason": str | None})
# sources: whether the queue and accounting could be asked
Sources = TypedDict("Sources", {"accounting": SourceState, "queue": SourceState, "reason": NotRequired[str | None]})
# usage.submissions' items: what the finished tasks of one submission used
SubmissionUsage = TypedDict("SubmissionUsage", {"job_id": str, "submission_id": str, "tasks": list[UsageFigures]})
# usage: what finished tasks used that their usage records do not hold yet
ObservedUsage = TypedDict("ObservedUsage", {"reason": str | None, "submissions": list[SubmissionUsage]})


class SchedulerRow(TypedDict):  # attempts' queue and accounting: one source's word on an attempt, normalised
    exit_code: NotRequired[int | None]
    raw: str
    reason: NotRequired[str | None]
    state: ObservedState


class Observation(TypedDict):
    """observations.schema.json attempts' items: the view of one attempt, from the queue and from accounting."""

    accounting: SchedulerRow | None
    attempt_id: str
    queue: SchedulerRow | None
    scheduler: SchedulerIdentity
    shard_id: str
    sources: NotRequired[AttemptSources]


class Observations(TypedDict):
    """observations.schema.json: what tau-observe saw, one view per attempt (the input of tau-reconcile)."""

    attempts: list[Observation]
    executor: ExecutorName
    kind: Literal["tau.observations"]
    observed_at: str
    run_id: str
    schema_version: Literal[1]
    sources: Sources
    usage: NotRequired[ObservedUsage]


# -- readiness.schema.json ------------------------------------------------------------------------------------------

class ReadinessV1(TypedDict):
    """readiness.schema.json $defs/v1: the readiness of an attempt of a run without services."""

    attempt_id: str
    kind: Literal["tau.readiness"]
    message: str | None
    progress_at: NotRequired[str | None]
    records_done: NotRequired[int | None]
    restarts: int
    revision: int
    run_id: str
    schema_version: Literal[1]
    shard_id: str
    state: Literal["starting", "running", "restarting", "stopped", "failed"]
    updated_at: str


# v2 deployments' backends: one process of a service; last_probe: the last probe of a service and what it found
Backend = TypedDict("Backend", {"backend": int, "devices": list[str], "pid": int | None, "port": int | None,
                                "state": DeploymentState})
Probe = TypedDict("Probe", {"message": str, "observed_at": str, "outcome": Literal["success", "failure"],
                            "reason_code": str})


class Deployment(TypedDict):  # v2 deployments' items: one service, its backends and its endpoint
    backends: list[Backend]
    endpoint: Literal["pending", "published", "failed"]
    expected_backends: int
    last_probe: Probe | None
    name: str
    ready_backends: int
    state: DeploymentState
    urls: list[str]


class ReadinessV2(TypedDict):
    """readiness.schema.json $defs/v2: the readiness of an attempt of a run with services, with its deployments."""

    attempt_id: str
    client: Literal["waiting", "running", "ended"]
    deployments: list[Deployment]
    kind: Literal["tau.readiness"]
    message: str | None
    progress_at: str | None
    records_done: int | None
    restarts: int
    revision: int
    run_id: str
    schema_version: Literal[2]
    shard_id: str
    state: DeploymentState
    updated_at: str


Readiness = ReadinessV1 | ReadinessV2  # readiness.schema.json: oneOf, told apart by schema_version


# -- collection-plan.schema.json and winner.schema.json -------------------------------------------------------------

CollectOptions = TypedDict("CollectOptions", {  # options: the tau-collect options that chose the shape (null: plan's)
    "format": Format | None, "group_readable": NotRequired[bool | None], "rows_per_partition": int | None})
# shards' items: a shard collected, and the sha256 of the winner it was collected from
CollectedShard = TypedDict("CollectedShard", {"shard_id": str, "winner_sha256": str})
Upload = TypedDict("Upload", {"generation": str, "url": str})  # upload: tau-collect --upload's prefix, generation
# image: the client image the collection ran in (its digest, runtime) and the destination's path inside it
CollectedIn = TypedDict("CollectedIn", {"destination": str, "digest": str, "runtime": str})


class CollectionPlan(TypedDict):
    """collection-plan.schema.json: what one collection merges, and where to (collections/COLLECTION/plan.json)."""

    collection_id: str
    created_at: str
    destination: str
    format: Format
    group_readable: NotRequired[bool]
    kind: Literal["tau.collection-plan"]
    memory: NotRequired[int]
    missing: NotRequired[list[MissingShard]]
    options: NotRequired[CollectOptions]
    plan_sha256: str
    records: int
    rows_per_partition: int
    run_id: str
    schema_digest: str
    schema_version: Literal[1]
    shards: list[CollectedShard]
    tasks: NotRequired[int]
    upload: NotRequired[Upload]
    image: NotRequired[CollectedIn]


class Winner(TypedDict):
    """winner.schema.json: a shard's one immutable winner (shards/SHARD/winner.json)."""

    attempt_id: str
    kind: Literal["tau.winner"]
    manifest: Ref
    ordinal: int
    published_at: str
    result: Ref
    run_id: str
    schema_version: Literal[1]
    shard_id: str
