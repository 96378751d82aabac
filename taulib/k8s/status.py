"""Why a Kubernetes Job or RayJob is where it is: the status snapshot, a pure function of classified reads.

`snapshot(name, namespace, job=, rayjob=, workloads=, pods=, admission_checks=)` takes four `taulib.k8s.api.Read`s
(and the reads of the AdmissionCheck objects the workloads name) and returns the versioned document `tau-observe
--kubernetes` prints (schema `share/schemas/workload-status.schema.json`; Tau's own contract alone is
`tau-v1alpha1-status.schema.json`; both described in tau-status(7)). It reads no clock and does no I/O: the same
reads give the same bytes. Tau's v1alpha1 contract is kept field by field: `schemaVersion`, `kind` (what was found),
`state` (Tau's words by Tau's rules, `v1alpha1`), `degraded`, `reason` (the first issue), `observations`
(observed, notFound, unavailable; a type that is not installed is unavailable with reason "resource type is not
installed"), `phases`, `job`, `rayJob`, `workloads`, `pods` (a RayJob's own failed pod after it succeeded is
phase "Teardown"), `pods[].containers[]`. tau's additions sit beside them: `lifecycle`, the word every tau status
uses (`STATES`, the same field a run's status carries), `stateDetail`, `primary`, `issues`, `podEvidence`, `asOf`,
and per entry `owner`, `health`, `uid` and the like. Where Tau omits an empty field, tau prints null.

This module assembles the snapshot: whose each pod and Kueue Workload is, each workload's verdict, the top-level
verdict, and the document. The rules, each a table or a short function in the module named:
- Job (`jobs.job_state`): Failed (or FailureTarget) wins over Complete; then active pods, then suspension (waiting
  for Kueue). A Job whose pods all wait to start is pending, not running (here).
- RayJob (`jobs.rayjob_state`): `RAYJOB_DEPLOYMENT` maps the controller's `jobDeploymentStatus` to a lifecycle
  state; the Ray job's `jobStatus` (which may be stale) never ends a RayJob the controller has not ended, it can only
  mark it degraded (`RAYJOB_APP`); an unknown value is `unknown`, never guessed.
- Same-name Job and RayJob (here): a Job owned by the RayJob is its submitter and the RayJob is the workload; an
  unrelated Job of the same name is reported beside it (`kind` "Job+RayJob") and, as in Tau, decides the top-level
  state.
- Every pod is judged against the workload that owns it (here, by ownerReferences: the Job's uid; the RayJob's
  RayCluster; the submitter Job), so one workload's pods never colour the other's health. A failed pod of a RayJob
  that succeeded is teardown, not an issue. Every issue is reported, in order, not only the first (`pods.pod_issues`,
  `kueue.workload_problems`).
- `degraded` is true exactly when `reason` is set (here): a failed state (which always has a reason), a container or
  pod issue, a Kueue eviction or rejected admission check, or a Ray job that failed under a controller still running.
  `issues` lists them all, containers' and pods' first (as Tau's reason puts a container's issue first), then the
  workload's own failure, then Kueue's; `reason` is the first.
- Terminal pod evidence (here): a workload that ended with no pod of its own left to read (a RayCluster torn down,
  a Job's pods deleted), or whose pods could not be read, has `podEvidence` unavailable with the reason; a failed one
  also has it as an issue, since how its containers ended cannot be told from here.
- A denied or failed read is `unavailable` with its reason and never stands for "not found" or "not admitted" (here
  and in `phases`).
- Where along its way the workload is: `phases.phases`, Tau's phases of the primary workload (a submitter Job whose
  RayJob cannot be read: the Job's, as Tau lists them), read from its own Kueue Workloads and pods only.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

from taulib.k8s import v1alpha1
from taulib.k8s.api import NOT_FOUND, NOT_INSTALLED, OBSERVED, UNAVAILABLE, Read
from taulib.k8s.jobs import STATES, TERMINAL, job_section, job_state, rayjob_section, rayjob_state
from taulib.k8s.kueue import workload_problems, workload_section
from taulib.k8s.objects import controller_ref, meta, owned_by, status_of
from taulib.k8s.phases import phases
from taulib.k8s.pods import pod_issues, pod_section

if TYPE_CHECKING:
    from collections.abc import Mapping

    from taulib.jsonio import Record

NOT_INSTALLED_REASON = "resource type is not installed"  # Tau's words, compared exactly by its readers

__all__ = ["SCHEMA_VERSION", "STATES", "TERMINAL", "owned_by", "snapshot"]

SCHEMA_VERSION = "v1alpha1"


class _Scene(NamedTuple):
    """The Job and the RayJob read, and how they relate."""
    job: Record | None  # the Job, when observed
    ray: Record | None  # the RayJob, when observed
    ray_ref: Record | None  # the Job's ownerReference to a RayJob
    submitter: bool  # the Job submits the RayJob: the RayJob is the workload
    cluster: str | None  # the RayJob's RayCluster


def snapshot(name: str, namespace: str, *, job: Read[Record], rayjob: Read[Record], workloads: Read[list[Record]],
             pods: Read[list[Record]], admission_checks: Mapping[str, Read[Record]] | None = None) -> Record:
    """The status snapshot of the workload `name` in `namespace`, from the four reads (and, by check name, the reads
    of the AdmissionCheck objects its Kueue Workloads name; a check without one was not looked up)."""
    scene = _scene(job, rayjob)
    pod_list = _pod_entries(scene, pods)
    wl_list = _workload_entries(scene, workloads, admission_checks)
    verdicts = _verdicts(name, scene, rayjob, pods, pod_list, wl_list)
    kind, primary = _kind(scene)
    lifecycle, detail, problems = _top_verdict(name, namespace, kind, primary, verdicts, job, rayjob)
    evidence = _pod_evidence(primary, lifecycle, pods, [p for p in pod_list if p["owner"] == primary])
    if evidence["state"] == UNAVAILABLE and lifecycle == "failed":
        problems = problems + [f"terminal pod evidence is unavailable: {evidence['reason']}"]
    sections = _sections(scene, verdicts)
    return {
        "schemaVersion": SCHEMA_VERSION,
        "name": name, "namespace": namespace,
        "kind": v1alpha1.kind(scene.job is not None, scene.ray is not None),
        "state": v1alpha1.state(scene.job, scene.ray, wl_list, len(pod_list), job.state == NOT_FOUND,
                                rayjob.state == NOT_FOUND),
        "lifecycle": lifecycle, "stateDetail": detail, "primary": primary,
        "degraded": bool(problems),
        "reason": problems[0] if problems else None,
        "issues": problems,
        "podEvidence": evidence,
        "asOf": _as_of(scene.job, scene.ray, pods.value if pods.state == OBSERVED else [],
                       workloads.value if workloads.state == OBSERVED else []),
        "observations": {"job": _observation(job), "rayJob": _observation(rayjob),
                         "workloads": _observation(workloads), "pods": _observation(pods)},
        "phases": _phases(scene, primary, lifecycle, job, rayjob, wl_list, workloads, pod_list, pods),
        "job": sections.get("job"),
        "rayJob": sections.get("rayJob"),
        "workloads": wl_list,
        "pods": pod_list,
    }


def _phases(scene: _Scene, primary: str | None, lifecycle: str, job: Read[Record], rayjob: Read[Record],
            wl_list: list[Record], workloads: Read[list[Record]], pod_list: list[Record], pods: Read[list[Record]]
            ) -> list[Record]:
    """The primary workload's phases, from its own Kueue Workloads and its own Pod objects. A submitter Job whose
    RayJob cannot be read gives its own phases, as Tau lists a Job found."""
    obj = scene.job if primary == "Job" else scene.ray
    kind = primary
    if primary == "RayJob" and scene.ray is None:
        kind, obj = "Job", scene.job
    read = (pods.value or []) if pods.state == OBSERVED and primary else []
    own_pods = [p for p in read if _pod_owner(scene, p)[0] == primary]
    lookup = "; ".join(r.reason or "" for r in (job, rayjob) if r.state == UNAVAILABLE) or None
    return phases(kind, obj, lifecycle, [w for w in wl_list if w["owner"] == primary], workloads, own_pods, pods,
                  lookup=lookup, manager_view=v1alpha1.manager_view(scene.job, scene.ray, wl_list, len(pod_list)))


def _pod_evidence(primary: str | None, lifecycle: str, pods: Read[list[Record]], own: list[Record]) -> Record:
    """Whether how the workload's pods ended can be read: unavailable after teardown or a failed read."""
    if pods.state == UNAVAILABLE:
        return {"state": UNAVAILABLE, "reason": f"its pods cannot be read: {pods.reason}"}
    if primary is not None and lifecycle in ("succeeded", "failed") and not own:
        what = "of its RayCluster's pods is left (torn down)" if primary == "RayJob" else \
            "of its pods is left (deleted, or never created)"
        return {"state": UNAVAILABLE, "reason": f"the {primary} ended and none {what}, so how its containers "
                "ended cannot be read here"}
    return {"state": OBSERVED, "reason": None}


# -- whose is each pod and each Kueue Workload ---------------------------------------------------------------------

def _scene(job: Read[Record], rayjob: Read[Record]) -> _Scene:
    job_obj = job.value if job.state == OBSERVED else None
    ray_obj = rayjob.value if rayjob.state == OBSERVED else None
    ray_ref = next((r for r in meta(job_obj).get("ownerReferences") or []
                    if isinstance(r, dict) and r.get("kind") == "RayJob"), None) if job_obj else None
    submitter = job_obj is not None and (owned_by(job_obj, ray_obj) if ray_obj else ray_ref is not None
                                         and rayjob.state == UNAVAILABLE)
    cluster = status_of(ray_obj).get("rayClusterName") if ray_obj else None
    return _Scene(job_obj, ray_obj, ray_ref, submitter, cluster)


def _pod_owner(scene: _Scene, pod: Record) -> tuple[str | None, str | None]:
    """(owner, role) of a pod: the Job's own pods, the submitter's, or the RayJob's RayCluster's by node type."""
    ref = controller_ref(pod) or {}
    if scene.job and ref.get("uid") == meta(scene.job).get("uid"):
        return ("RayJob", "submitter") if scene.submitter else ("Job", None)
    if scene.ray and ref.get("kind") == "RayCluster" and scene.cluster and ref.get("name") == scene.cluster:
        return "RayJob", (meta(pod).get("labels") or {}).get("ray.io/node-type") or None
    return None, None


def _workload_owner(scene: _Scene, wl: Record) -> str | None:
    for kind, obj in (("Job", scene.job), ("RayJob", scene.ray)):
        if obj and (owned_by(wl, obj) or (meta(wl).get("labels") or {}).get("kueue.x-k8s.io/job-uid")
                    == meta(obj).get("uid")):
            return "RayJob" if kind == "Job" and scene.submitter else kind
    return None


def _pod_entries(scene: _Scene, pods: Read[list[Record]]) -> list[Record]:
    out = [pod_section(p, *_pod_owner(scene, p)) for p in ((pods.value or []) if pods.state == OBSERVED else [])]
    out.sort(key=lambda p: (str(p["name"]), str(p["uid"])))
    return out


def _workload_entries(scene: _Scene, workloads: Read[list[Record]], controllers: Mapping[str, Read[Record]] | None
                      ) -> list[Record]:
    out = [workload_section(w, _workload_owner(scene, w), controllers)
           for w in ((workloads.value or []) if workloads.state == OBSERVED else [])]
    out.sort(key=lambda w: str(w["name"]))
    return out


# -- each workload's verdict, judged only with its own pods and Kueue Workloads -------------------------------------

def _verdicts(name: str, scene: _Scene, rayjob: Read[Record], pods: Read[list[Record]], pod_list: list[Record],
              wl_list: list[Record]) -> dict[str, Record]:
    """{"Job"|"RayJob": {state, detail, problems}}; marks each pod entry's health as it goes."""
    verdicts = _own_verdicts(name, scene, rayjob)
    _waiting_job_pods(verdicts.get("Job"), pods, [p for p in pod_list if p["owner"] == "Job"])
    found = _judge_pods(verdicts, pod_list)
    for owner, verdict in verdicts.items():  # containers' and pods' issues first, as Tau's reason reads
        verdict["problems"][:0] = found.get(owner, [])
    for wl in wl_list:
        if wl["owner"] in verdicts:
            verdicts[wl["owner"]]["problems"].extend(workload_problems(wl))
    return verdicts


def _own_verdicts(name: str, scene: _Scene, rayjob: Read[Record]) -> dict[str, Record]:
    """What the Job and the RayJob each say of themselves."""
    verdicts: dict[str, Record] = {}
    if scene.job is not None and not scene.submitter:
        state, detail, failure = job_state(scene.job)
        verdicts["Job"] = {"state": state, "detail": detail, "problems": [failure] if failure else []}
    if scene.ray is not None:
        state, detail, failure, app = rayjob_state(scene.ray)
        verdicts["RayJob"] = {"state": state, "detail": detail,
                              "problems": [p for p in (failure, app) if p]}
    elif scene.submitter:  # the Job says it belongs to a RayJob we may not read
        verdicts["RayJob"] = {"state": "unknown", "detail": f"the Job {name!r} is the submitter of RayJob "
                              f"{(scene.ray_ref or {}).get('name')!r}, which cannot be read: {rayjob.reason}",
                              "problems": []}
    return verdicts


def _waiting_job_pods(verdict: Record | None, pods: Read[list[Record]], job_pods: list[Record]) -> None:
    if verdict and verdict["state"] == "running" and pods.state == OBSERVED and job_pods \
            and not any(p["phase"] != "Pending" for p in job_pods):
        # the Job counts pods that wait for a node or an image as active: they are not running yet
        verdict["state"] = "pending"
        verdict["detail"] = f"{len(job_pods)} pod{'s' if len(job_pods) != 1 else ''} waiting to start"


def _judge_pods(verdicts: dict[str, Record], pod_list: list[Record]) -> dict[str, list[str]]:
    """Each pod's health; the issues found, by owner. A failed pod of a RayJob that succeeded is its teardown
    (phase "Teardown", as Tau shows it), judged against its own RayJob only."""
    out: dict[str, list[str]] = {}
    for pod in pod_list:
        verdict = verdicts.get(pod["owner"])
        if verdict is None:
            pod["health"] = "unowned"
            continue
        found = pod_issues(pod)
        if pod["owner"] == "RayJob" and verdict["state"] == "succeeded" and (found or pod["phase"] == "Failed"):
            pod["health"] = "teardown"
            if pod["phase"] == "Failed":
                pod["phase"] = "Teardown"
        elif found:
            pod["health"] = "issue"
            out.setdefault(pod["owner"], []).extend(found)
    return out


# -- the top-level kind, state, detail and problems ----------------------------------------------------------------

def _kind(scene: _Scene) -> tuple[str, str | None]:
    """(kind, primary): what was found, and which workload's verdict is the top-level one (None: neither)."""
    if scene.job is not None and scene.ray is not None:
        kind = "RayJob" if scene.submitter else "Job+RayJob"
    elif scene.job is not None:
        kind = "RayJob" if scene.submitter else "Job"
    else:
        kind = "RayJob" if scene.ray is not None else "Unknown"
    return kind, {"Job": "Job", "Job+RayJob": "Job", "RayJob": "RayJob"}.get(kind)


def _top_verdict(name: str, namespace: str, kind: str, primary: str | None, verdicts: dict[str, Record],
                 job: Read[Record], rayjob: Read[Record]) -> tuple[str, str, list[str]]:
    if primary:
        verdict = verdicts[primary]
        state, detail, problems = verdict["state"], verdict["detail"], verdict["problems"]
        if kind == "Job+RayJob":
            other = verdicts["RayJob"]
            detail += (f"; a RayJob of the same name, not related to it, is in state {other['state']}"
                       f"{' and degraded' if other['problems'] else ''} (see rayJob)")
    else:
        unavailable = [r.reason or "" for r in (job, rayjob) if r.state == UNAVAILABLE]  # each has its reason
        problems = []
        if unavailable:
            state, detail = "unknown", "cannot tell: " + "; ".join(unavailable)
        else:
            state, detail = "not_found", f"no Job or RayJob named {name!r} in namespace {namespace!r}"
    if state == "failed" and not problems:
        problems = [f"the {primary} failed"]
    return state, detail, problems


# -- the sections and the document ---------------------------------------------------------------------------------

def _sections(scene: _Scene, verdicts: dict[str, Record]) -> Record:
    sections = {}
    if scene.job is not None:
        # a submitter Job is part of its RayJob, which carries the verdict: the Job's own state, never degraded
        own = verdicts.get("Job")
        if own is None:
            own_state, own_detail, _ = job_state(scene.job)
            own = {"state": own_state, "detail": own_detail, "problems": []}
        sections["job"] = job_section(scene.job, (scene.ray_ref or {}).get("name") if scene.submitter else None,
                                      own, v1alpha1.job_state(scene.job))
    if scene.ray is not None:
        sections["rayJob"] = rayjob_section(scene.ray, verdicts["RayJob"], v1alpha1.rayjob_state(scene.ray))
    return sections


def _observation(read: Read[object]) -> Record:
    """A read as Tau's `observations` say it; a type that is not installed is unavailable, in Tau's exact words,
    with which type in `detail`."""
    if read.not_installed:
        return {"state": UNAVAILABLE, "reason": NOT_INSTALLED_REASON,
                "detail": (read.reason or "")[len(NOT_INSTALLED):].lstrip(": ") or None}
    return {"state": read.state, "reason": read.reason, "detail": None}


def _as_of(*sources: object) -> str | None:
    """The latest timestamp in the objects read: what the snapshot is as of (never the local clock)."""
    latest = None

    def walk(value: object, key: str = "") -> None:
        nonlocal latest
        if isinstance(value, dict):
            for k, v in value.items():
                walk(v, k)
        elif isinstance(value, list):
            for v in value:
                walk(v, key)
        elif isinstance(value, str) and key in _TIME_KEYS and (latest is None or value > latest):
            latest = value

    for source in sources:
        walk(source)
    return latest


_TIME_KEYS = frozenset({"creationTimestamp", "lastTransitionTime", "lastProbeTime", "startTime", "completionTime",
                        "endTime", "startedAt", "finishedAt", "lastUpdateTime", "requeueAt"})
