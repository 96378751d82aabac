"""Why a Kubernetes Job or RayJob is where it is: the status snapshot, a pure function of classified reads.

`snapshot(name, namespace, job=, rayjob=, workloads=, pods=)` takes four `taulib.k8s.api.Read`s and returns the
versioned document `tau-observe --kubernetes` prints (schema `share/schemas/workload-status.schema.json`, described
in tau-status(7)). It reads no clock and does no I/O: the same reads give the same bytes. Tau's v1alpha1 field
names are kept (`schemaVersion`, `state`, `degraded`, `reason`, `observations`, `phases`, `job`, `rayJob`,
`workloads`, `pods[].containers[]`); the state words are the ones every tau status uses (`STATES`).

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
- A denied or failed read is `unavailable` with its reason and never stands for "not found" or "not admitted" (here
  and in `phases`).
- Where along its way the workload is: `phases.phases`.
"""

from __future__ import annotations

from typing import NamedTuple

from taulib.k8s.api import OBSERVED, UNAVAILABLE, Read
from taulib.k8s.jobs import STATES, TERMINAL, job_section, job_state, rayjob_section, rayjob_state
from taulib.k8s.kueue import workload_problems, workload_section
from taulib.k8s.objects import controller_ref, meta, owned_by, status_of
from taulib.k8s.phases import phases
from taulib.k8s.pods import pod_issues, pod_section

__all__ = ["SCHEMA_VERSION", "STATES", "TERMINAL", "owned_by", "snapshot"]

SCHEMA_VERSION = "v1alpha1"


class _Scene(NamedTuple):
    """The Job and the RayJob read, and how they relate."""
    job: dict | None  # the Job, when observed
    ray: dict | None  # the RayJob, when observed
    ray_ref: dict | None  # the Job's ownerReference to a RayJob
    submitter: bool  # the Job submits the RayJob: the RayJob is the workload
    cluster: str | None  # the RayJob's RayCluster


def snapshot(name: str, namespace: str, *, job: Read, rayjob: Read, workloads: Read, pods: Read) -> dict:
    """The status snapshot of the workload `name` in `namespace`, from the four reads."""
    scene = _scene(job, rayjob)
    pod_list = _pod_entries(scene, pods)
    wl_list = _workload_entries(scene, workloads)
    verdicts = _verdicts(name, scene, rayjob, pods, pod_list, wl_list)
    kind, primary = _kind(scene)
    state, detail, problems = _top_verdict(name, namespace, kind, primary, verdicts, job, rayjob)
    sections = _sections(scene, verdicts)
    return {
        "schemaVersion": SCHEMA_VERSION,
        "name": name, "namespace": namespace, "kind": kind,
        "state": state, "stateDetail": detail,
        "degraded": bool(problems),
        "reason": "; ".join(problems) if problems else None,
        "issues": problems,
        "asOf": _as_of(scene.job, scene.ray, pods.value if pods.state == OBSERVED else [],
                       workloads.value if workloads.state == OBSERVED else []),
        "observations": {"job": _observation(job), "rayJob": _observation(rayjob),
                         "workloads": _observation(workloads), "pods": _observation(pods)},
        "phases": phases(kind, primary, state, scene.job if primary == "Job" else None,
                         scene.ray if primary == "RayJob" else None,
                         [w for w in wl_list if w["owner"] == primary], workloads,
                         [p for p in pod_list if p["owner"] == primary], pods),
        "job": sections.get("job"),
        "rayJob": sections.get("rayJob"),
        "workloads": wl_list,
        "pods": pod_list,
    }


# -- whose is each pod and each Kueue Workload ---------------------------------------------------------------------

def _scene(job: Read, rayjob: Read) -> _Scene:
    job_obj = job.value if job.state == OBSERVED else None
    ray_obj = rayjob.value if rayjob.state == OBSERVED else None
    ray_ref = next((r for r in meta(job_obj).get("ownerReferences") or []
                    if isinstance(r, dict) and r.get("kind") == "RayJob"), None) if job_obj else None
    submitter = job_obj is not None and (owned_by(job_obj, ray_obj) if ray_obj else ray_ref is not None
                                         and rayjob.state == UNAVAILABLE)
    cluster = status_of(ray_obj).get("rayClusterName") if ray_obj else None
    return _Scene(job_obj, ray_obj, ray_ref, submitter, cluster)


def _pod_owner(scene: _Scene, pod: dict) -> tuple[str | None, str | None]:
    """(owner, role) of a pod: the Job's own pods, the submitter's, or the RayJob's RayCluster's by node type."""
    ref = controller_ref(pod) or {}
    if scene.job and ref.get("uid") == meta(scene.job).get("uid"):
        return ("RayJob", "submitter") if scene.submitter else ("Job", None)
    if scene.ray and ref.get("kind") == "RayCluster" and scene.cluster and ref.get("name") == scene.cluster:
        return "RayJob", (meta(pod).get("labels") or {}).get("ray.io/node-type") or None
    return None, None


def _workload_owner(scene: _Scene, wl: dict) -> str | None:
    for kind, obj in (("Job", scene.job), ("RayJob", scene.ray)):
        if obj and (owned_by(wl, obj) or (meta(wl).get("labels") or {}).get("kueue.x-k8s.io/job-uid")
                    == meta(obj).get("uid")):
            return "RayJob" if kind == "Job" and scene.submitter else kind
    return None


def _pod_entries(scene: _Scene, pods: Read) -> list[dict]:
    out = [pod_section(p, *_pod_owner(scene, p)) for p in (pods.value if pods.state == OBSERVED else [])]
    out.sort(key=lambda p: (str(p["name"]), str(p["uid"])))
    return out


def _workload_entries(scene: _Scene, workloads: Read) -> list[dict]:
    out = [workload_section(w, _workload_owner(scene, w))
           for w in (workloads.value if workloads.state == OBSERVED else [])]
    out.sort(key=lambda w: str(w["name"]))
    return out


# -- each workload's verdict, judged only with its own pods and Kueue Workloads -------------------------------------

def _verdicts(name: str, scene: _Scene, rayjob: Read, pods: Read, pod_list: list[dict],
              wl_list: list[dict]) -> dict[str, dict]:
    """{"Job"|"RayJob": {state, detail, problems}}; marks each pod entry's health as it goes."""
    verdicts = _own_verdicts(name, scene, rayjob)
    _waiting_job_pods(verdicts.get("Job"), pods, [p for p in pod_list if p["owner"] == "Job"])
    _judge_pods(verdicts, pod_list)
    for wl in wl_list:
        if wl["owner"] in verdicts:
            verdicts[wl["owner"]]["problems"].extend(workload_problems(wl))
    return verdicts


def _own_verdicts(name: str, scene: _Scene, rayjob: Read) -> dict[str, dict]:
    """What the Job and the RayJob each say of themselves."""
    verdicts: dict[str, dict] = {}
    if scene.job is not None and not scene.submitter:
        state, detail, failure = job_state(scene.job)
        verdicts["Job"] = {"state": state, "detail": detail, "problems": [failure] if failure else []}
    if scene.ray is not None:
        state, detail, failure, app = rayjob_state(scene.ray)
        verdicts["RayJob"] = {"state": state, "detail": detail,
                              "problems": [p for p in (failure, app) if p]}
    elif scene.submitter:  # the Job says it belongs to a RayJob we may not read
        verdicts["RayJob"] = {"state": "unknown", "detail": f"the Job {name!r} is the submitter of RayJob "
                              f"{scene.ray_ref.get('name')!r}, which cannot be read: {rayjob.reason}",
                              "problems": []}
    return verdicts


def _waiting_job_pods(verdict: dict | None, pods: Read, job_pods: list[dict]) -> None:
    if verdict and verdict["state"] == "running" and pods.state == OBSERVED and job_pods \
            and not any(p["phase"] != "Pending" for p in job_pods):
        # the Job counts pods that wait for a node or an image as active: they are not running yet
        verdict["state"] = "pending"
        verdict["detail"] = f"{len(job_pods)} pod{'s' if len(job_pods) != 1 else ''} waiting to start"


def _judge_pods(verdicts: dict[str, dict], pod_list: list[dict]) -> None:
    """Each pod's health, and its issues added to its owner's problems."""
    for pod in pod_list:
        verdict = verdicts.get(pod["owner"])
        if verdict is None:
            pod["health"] = "unowned"
            continue
        found = pod_issues(pod)
        if found and pod["owner"] == "RayJob" and verdict["state"] == "succeeded":
            pod["health"] = "teardown"
        elif found:
            pod["health"] = "issue"
            verdict["problems"].extend(found)


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


def _top_verdict(name: str, namespace: str, kind: str, primary: str | None, verdicts: dict[str, dict], job: Read,
                 rayjob: Read) -> tuple[str, str, list[str]]:
    if primary:
        verdict = verdicts[primary]
        state, detail, problems = verdict["state"], verdict["detail"], verdict["problems"]
        if kind == "Job+RayJob":
            other = verdicts["RayJob"]
            detail += (f"; a RayJob of the same name, not related to it, is in state {other['state']}"
                       f"{' and degraded' if other['problems'] else ''} (see rayJob)")
    else:
        unavailable = [r.reason for r in (job, rayjob) if r.state == UNAVAILABLE]
        problems = []
        if unavailable:
            state, detail = "unknown", "cannot tell: " + "; ".join(unavailable)
        else:
            state, detail = "not_found", f"no Job or RayJob named {name!r} in namespace {namespace!r}"
    if state == "failed" and not problems:
        problems = [f"the {primary} failed"]
    return state, detail, problems


# -- the sections and the document ---------------------------------------------------------------------------------

def _sections(scene: _Scene, verdicts: dict[str, dict]) -> dict:
    sections = {}
    if scene.job is not None:
        # a submitter Job is part of its RayJob, which carries the verdict: the Job's own state, never degraded
        own = verdicts.get("Job")
        if own is None:
            own_state, own_detail, _ = job_state(scene.job)
            own = {"state": own_state, "detail": own_detail, "problems": []}
        sections["job"] = job_section(scene.job, (scene.ray_ref or {}).get("name") if scene.submitter else None,
                                      own)
    if scene.ray is not None:
        sections["rayJob"] = rayjob_section(scene.ray, verdicts["RayJob"])
    return sections


def _observation(read: Read) -> dict:
    return {"state": read.state, "reason": read.reason}


def _as_of(*sources) -> str | None:
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
