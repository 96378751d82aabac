"""Why a Kubernetes Job or RayJob is where it is: the status snapshot, a pure function of classified reads.

`snapshot(name, namespace, job=, rayjob=, workloads=, pods=)` takes four `taulib.k8s.api.Read`s and returns the
versioned document `tau-observe --kubernetes` prints (schema `share/schemas/workload-status.schema.json`, described
in tau-status(7)). It reads no clock and does no I/O: the same reads give the same bytes. Tau's v1alpha1 field
names are kept (`schemaVersion`, `state`, `degraded`, `reason`, `observations`, `phases`, `job`, `rayJob`,
`workloads`, `pods[].containers[]`); the state words are the ones every tau status uses.

The rules, each a table or a short function here:
- Job: Failed (or FailureTarget) wins over Complete; then active pods, then suspension (waiting for Kueue).
- RayJob: `RAYJOB_DEPLOYMENT` maps the controller's `jobDeploymentStatus` to a lifecycle state; the Ray job's
  `jobStatus` (which may be stale) never ends a RayJob the controller has not ended, it can only mark it degraded
  (`RAYJOB_APP`); an unknown value is `unknown`, never guessed.
- Same-name Job and RayJob: a Job owned by the RayJob is its submitter and the RayJob is the workload; an unrelated
  Job of the same name is reported beside it (`kind` "Job+RayJob") and, as in Tau, decides the top-level state.
- Every pod is judged against the workload that owns it (ownerReferences: the Job's uid; the RayJob's RayCluster;
  the submitter Job), so one workload's pods never colour the other's health. A failed pod of a RayJob that
  succeeded is teardown, not an issue. Every issue is reported, in order, not only the first.
- `degraded` is true exactly when `reason` is set: a failed state (which always has a reason), a container or pod
  issue, a Kueue eviction or rejected admission check, or a Ray job that failed under a controller still running.
- A denied or failed read is `unavailable` with its reason and never stands for "not found" or "not admitted".
"""

from __future__ import annotations

from taulib.k8s.api import NOT_FOUND, OBSERVED, UNAVAILABLE, Read

SCHEMA_VERSION = "v1alpha1"
STATES = ("pending", "running", "succeeded", "failed", "unknown", "not_found")
TERMINAL = frozenset({"succeeded", "failed", "not_found"})

QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
WAITING_ISSUES = frozenset({"CrashLoopBackOff", "CreateContainerConfigError", "CreateContainerError",
                            "RunContainerError", "Error", "ErrImagePull", "ImagePullBackOff", "InvalidImageName"})
IMAGE_ISSUES = frozenset({"ErrImagePull", "ImagePullBackOff", "InvalidImageName"})

# jobDeploymentStatus (the KubeRay controller's lifecycle) -> (state, detail). "" is a RayJob nobody has acted on.
RAYJOB_DEPLOYMENT = {
    "": ("pending", "new: the RayJob controller has not acted on it yet"),
    "New": ("pending", "new: the RayJob controller has not acted on it yet"),
    "Initializing": ("pending", "initializing: the RayCluster is starting"),
    "Waiting": ("pending", "waiting for the Ray job to be submitted"),
    "Suspending": ("pending", "suspending: the RayCluster is being deleted"),
    "Suspended": ("pending", "suspended"),
    "Retrying": ("pending", "retrying: a new RayCluster is being created after a failed attempt"),
    "Running": ("running", "running on its RayCluster"),
    "Complete": ("succeeded", "complete"),  # refined by RAYJOB_COMPLETE: older KubeRay ends failed jobs Complete
    "Failed": ("failed", "the RayJob failed"),
    "ValidationFailed": ("failed", "the RayJob spec failed validation"),
}
# jobStatus when jobDeploymentStatus is Complete -> state
RAYJOB_COMPLETE = {"SUCCEEDED": "succeeded", "FAILED": "failed", "STOPPED": "failed"}
# jobStatus under a live controller: what the Ray job itself says
RAYJOB_APP = {
    "": None, "PENDING": None, "RUNNING": None,
    "SUCCEEDED": "the Ray job SUCCEEDED; the controller has not completed the RayJob yet",
    "FAILED": "the Ray job FAILED while the RayJob controller still reports {deployment}",
    "STOPPED": "the Ray job was STOPPED while the RayJob controller still reports {deployment}",
}


# -- small accessors -----------------------------------------------------------------------------------------------

def _meta(obj: dict | None) -> dict:
    return (obj or {}).get("metadata") or {}


def _status(obj: dict | None) -> dict:
    return (obj or {}).get("status") or {}


def _conditions(obj: dict | None) -> list[dict]:
    return [c for c in _status(obj).get("conditions") or [] if isinstance(c, dict)]


def _condition(obj: dict | None, kind: str) -> dict | None:
    for cond in _conditions(obj):
        if cond.get("type") == kind and cond.get("status") == "True":
            return cond
    return None


def _explain(cond: dict | None, default: str) -> str:
    """"Reason: message" of a condition."""
    if not cond:
        return default
    parts = [p for p in (cond.get("reason"), cond.get("message")) if p]
    return ": ".join(parts) if parts else default


def _conditions_out(obj: dict | None) -> list[dict]:
    out = [{"type": c.get("type"), "status": c.get("status"), "reason": c.get("reason") or None,
            "message": c.get("message") or None, "lastTransitionTime": c.get("lastTransitionTime") or None}
           for c in _conditions(obj) if isinstance(c.get("type"), str)]
    return sorted(out, key=lambda c: c["type"])


def _controller(obj: dict) -> dict | None:
    refs = [r for r in _meta(obj).get("ownerReferences") or [] if isinstance(r, dict)]
    for ref in refs:
        if ref.get("controller"):
            return ref
    return refs[0] if refs else None


def owned_by(obj: dict | None, owner: dict | None) -> bool:
    """Whether one of obj's ownerReferences is `owner`, by uid (names can be reused; uids cannot)."""
    uid = _meta(owner).get("uid")
    return bool(uid) and any(isinstance(r, dict) and r.get("uid") == uid
                             for r in _meta(obj).get("ownerReferences") or [])


def _int(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


# -- the workloads -------------------------------------------------------------------------------------------------

def job_state(job: dict) -> tuple[str, str, str | None]:
    """(state, detail, failure reason) of a batch Job."""
    st = _status(job)
    failed = _condition(job, "Failed") or _condition(job, "FailureTarget")
    if failed:
        why = failed.get("reason") or failed["type"]
        return "failed", f"the Job failed ({why})", _explain(failed, "the Job failed")
    if _condition(job, "Complete") or _condition(job, "SuccessCriteriaMet"):
        return "succeeded", "the Job completed", None
    active = _int(st.get("active"))
    if active:
        ready = st.get("ready")
        suffix = f", {ready} ready" if isinstance(ready, int) else ""
        return "running", f"{active} active pod{'s' if active != 1 else ''}{suffix}", None
    if (job.get("spec") or {}).get("suspend") or _condition(job, "Suspended"):
        queue = (_meta(job).get("labels") or {}).get(QUEUE_LABEL)
        if queue:
            return "pending", f"suspended: waiting for Kueue to admit it (queue {queue!r})", None
        return "pending", "suspended", None
    return "pending", "created, no active pods yet", None


def rayjob_state(rayjob: dict) -> tuple[str, str, str | None, str | None]:
    """(state, detail, failure reason, app problem) of a RayJob, from the enumerated tables above."""
    st = _status(rayjob)
    deployment = st.get("jobDeploymentStatus") or ""
    app = st.get("jobStatus") or ""
    app = app if isinstance(app, str) else repr(app)
    explained = ": ".join(p for p in (st.get("reason"), st.get("message")) if p) or None
    if not isinstance(deployment, str) or deployment not in RAYJOB_DEPLOYMENT:  # a newer KubeRay: never guessed
        return "unknown", f"unrecognised jobDeploymentStatus {deployment!r} (jobStatus {app!r})", None, None
    state, detail = RAYJOB_DEPLOYMENT[deployment]
    if deployment == "Complete":
        state = RAYJOB_COMPLETE.get(app, "unknown")
        if state == "unknown":
            return state, f"jobDeploymentStatus Complete with jobStatus {app!r}: cannot tell how it ended", \
                None, None
        detail = f"complete: the Ray job {app}"
        reason = None if state == "succeeded" else (explained or f"the Ray job {app}")
        return state, detail, reason, None
    if state == "failed":
        detail = f"{detail} ({st['reason']})" if st.get("reason") else detail
        return state, detail, explained or f"jobDeploymentStatus {deployment} (jobStatus {app or 'unset'})", None
    problem = RAYJOB_APP.get(app, "the Ray job reports an unrecognised jobStatus {app!r}")
    if deployment == "Retrying":
        problem = "a previous attempt failed" + (f" ({explained})" if explained else "")
    if app and state == "running":
        detail = f"{detail}; the Ray job is {app}"
    return state, detail, None, None if problem is None else problem.format(deployment=deployment, app=app)


def job_section(job: dict, submitter_of: str | None, verdict: dict) -> dict:
    """The Job as reported, with its verdict (state, detail, problems)."""
    st = _status(job)
    return {"name": _meta(job).get("name"), "uid": _meta(job).get("uid"),
            "submitterOf": submitter_of,
            "state": verdict["state"], "stateDetail": verdict["detail"],
            "suspended": bool((job.get("spec") or {}).get("suspend")),
            "active": _int(st.get("active")), "succeeded": _int(st.get("succeeded")), "failed": _int(st.get("failed")),
            "startTime": st.get("startTime") or None, "completionTime": st.get("completionTime") or None,
            "conditions": _conditions_out(job), "degraded": bool(verdict["problems"])}


def rayjob_section(rayjob: dict, verdict: dict) -> dict:
    """The RayJob as reported, with its verdict (state, detail, problems)."""
    st = _status(rayjob)
    return {"name": _meta(rayjob).get("name"), "uid": _meta(rayjob).get("uid"),
            "state": verdict["state"], "stateDetail": verdict["detail"],
            "deploymentStatus": st.get("jobDeploymentStatus") or None, "jobStatus": st.get("jobStatus") or None,
            "rayClusterName": st.get("rayClusterName") or None, "jobId": st.get("jobId") or None,
            "reason": st.get("reason") or None, "message": st.get("message") or None,
            "succeeded": _int(st.get("succeeded")), "failed": _int(st.get("failed")),
            "startTime": st.get("startTime") or None, "endTime": st.get("endTime") or None,
            "conditions": _conditions_out(rayjob), "degraded": bool(verdict["problems"])}


# -- Kueue ---------------------------------------------------------------------------------------------------------

def workload_section(wl: dict, owner: str | None) -> dict:
    st = _status(wl)
    finished, evicted = _condition(wl, "Finished"), _condition(wl, "Evicted")
    admitted, reserved = _condition(wl, "Admitted"), _condition(wl, "QuotaReserved")
    if finished:
        phase, cond = "Finished", finished
    elif evicted:  # Kueue can leave Admitted and QuotaReserved True beside Evicted: the eviction is the news
        phase, cond = "Evicted", evicted
    elif admitted:
        phase, cond = "Admitted", None
    elif reserved:
        phase, cond = "QuotaReserved", None
    else:
        phase = "Pending"
        cond = next((c for c in _conditions(wl) if c.get("type") == "QuotaReserved" and c.get("status") == "False"),
                    None)
    checks = sorted(({"name": c.get("name"), "state": c.get("state") or "Pending", "message": c.get("message") or None}
                     for c in st.get("admissionChecks") or [] if isinstance(c, dict) and c.get("name")),
                    key=lambda c: c["name"])
    admission = st.get("admission") or {}
    return {"name": _meta(wl).get("name"), "owner": owner, "queue": (wl.get("spec") or {}).get("queueName") or None,
            "clusterQueue": admission.get("clusterQueue") or None, "phase": phase,
            "admitted": admitted is not None, "reason": (cond or {}).get("reason") or None,
            "message": (cond or {}).get("message") or None,
            "requeueCount": _int((st.get("requeueState") or {}).get("count")),
            "workerCluster": st.get("clusterName") or None,
            "nominatedClusters": sorted(n for n in st.get("nominatedClusterNames") or [] if isinstance(n, str)),
            "admissionChecks": checks}


def workload_problems(wl: dict) -> list[str]:
    """What Kueue did to a workload that a person must know (a finished workload's end is its owner's state)."""
    out = []
    if wl["phase"] == "Evicted":
        out.append(f"Kueue evicted workload {wl['name']}: " + ": ".join(
            p for p in (wl["reason"], wl["message"]) if p))
    for check in wl["admissionChecks"]:
        if check["state"] == "Rejected":
            out.append(f"admission check {check['name']} rejected workload {wl['name']}"
                       + (f": {check['message']}" if check["message"] else ""))
    return out


# -- pods ----------------------------------------------------------------------------------------------------------

def _container(spec_kind: str, cs: dict) -> dict:
    state = cs.get("state") or {}
    last = (cs.get("lastState") or {}).get("terminated") or {}
    name = next((k for k in ("terminated", "waiting", "running") if k in state), "waiting")
    detail = state.get(name) or {}
    exit_code = detail.get("exitCode") if name == "terminated" else None
    return {"kind": spec_kind, "name": cs.get("name"), "state": name, "ready": bool(cs.get("ready")),
            "restartCount": _int(cs.get("restartCount")), "reason": detail.get("reason") or None,
            "exitCode": exit_code if isinstance(exit_code, int) else None,
            "lastReason": last.get("reason") or None,
            "lastExitCode": last.get("exitCode") if isinstance(last.get("exitCode"), int) else None}


def container_issue(c: dict) -> bool:
    if c["state"] == "terminated":
        return c["exitCode"] not in (0, None) or (c["exitCode"] is None and c["reason"] not in (None, "Completed"))
    return c["state"] == "waiting" and c["reason"] in WAITING_ISSUES


def _issue_text(pod: str, c: dict) -> str:
    text = f"{pod}/{c['name']} {c['state']}"
    if c["reason"]:
        text += f" reason={c['reason']}"
    exit_code = c["exitCode"] if c["state"] == "terminated" else c["lastExitCode"]
    if exit_code is not None:
        text += f" exit={exit_code}"
    return text + f" restarts={c['restartCount']}"


def pod_state(phase: str, reason: str | None, containers: list[dict], conditions: list[dict]) -> str:
    """A pod in the observed-state words of every tau observation (tau-status(7))."""
    if phase == "Unknown":
        return "node_failed"
    if phase == "Pending":
        return "pending"
    if phase == "Running":
        return "running"
    if phase == "Succeeded":
        return "completed"
    if any(c["reason"] == "OOMKilled" for c in containers if c["state"] == "terminated"):
        return "out_of_memory"
    if reason == "DeadlineExceeded":
        return "timed_out"
    if reason in ("Evicted", "Preempted", "Preempting") or any(
            c["type"] == "DisruptionTarget" and c["status"] == "True" for c in conditions):
        return "preempted"
    return "failed"


def pod_section(pod: dict, owner: str | None, role: str | None) -> dict:
    spec, st = pod.get("spec") or {}, _status(pod)
    statuses = [("init", cs) for cs in st.get("initContainerStatuses") or [] if isinstance(cs, dict)] + \
        [("app", cs) for cs in st.get("containerStatuses") or [] if isinstance(cs, dict)]
    containers = [_container(kind, cs) for kind, cs in statuses]
    reported = {(c["kind"], c["name"]) for c in containers}
    for kind, key in (("init", "initContainers"), ("app", "containers")):  # declared but not started yet
        for ctr in spec.get(key) or []:
            if isinstance(ctr, dict) and (kind, ctr.get("name")) not in reported:
                containers.append({"kind": kind, "name": ctr.get("name"), "state": "waiting", "ready": False,
                                   "restartCount": 0, "reason": None, "exitCode": None, "lastReason": None,
                                   "lastExitCode": None})
    containers.sort(key=lambda c: (c["kind"] != "init", str(c["name"])))
    apps = [c for c in containers if c["kind"] == "app"]
    phase = st.get("phase") or "Pending"
    conditions = _conditions_out(pod)
    return {"name": _meta(pod).get("name"), "uid": _meta(pod).get("uid"), "owner": owner, "role": role,
            "phase": phase, "state": pod_state(phase, st.get("reason"), containers, conditions),
            "health": "ok", "node": spec.get("nodeName") or None,
            "ready": f"{sum(c['ready'] for c in apps)}/{len(apps)}",
            "restarts": sum(c["restartCount"] for c in containers),
            "reason": st.get("reason") or None, "message": st.get("message") or None,
            "conditions": conditions, "containers": containers}


def pod_issues(pod: dict) -> list[str]:
    issues = [_issue_text(pod["name"], c) for c in pod["containers"] if container_issue(c)]
    if not issues and pod["phase"] == "Failed":
        issues.append(f"{pod['name']} failed" + (f" reason={pod['reason']}" if pod["reason"] else "")
                      + (f": {pod['message']}" if pod["message"] else ""))
    return issues


# -- the snapshot --------------------------------------------------------------------------------------------------

def _observation(read: Read) -> dict:
    return {"state": read.state, "reason": read.reason}


def snapshot(name: str, namespace: str, *, job: Read, rayjob: Read, workloads: Read, pods: Read) -> dict:
    job_obj = job.value if job.state == OBSERVED else None
    ray_obj = rayjob.value if rayjob.state == OBSERVED else None
    job_owner_ray = next((r for r in _meta(job_obj).get("ownerReferences") or []
                          if isinstance(r, dict) and r.get("kind") == "RayJob"), None) if job_obj else None
    submitter = job_obj is not None and (owned_by(job_obj, ray_obj) if ray_obj else job_owner_ray is not None
                                         and rayjob.state == UNAVAILABLE)
    cluster = _status(ray_obj).get("rayClusterName") if ray_obj else None

    # whose is each pod and each Kueue Workload
    def pod_owner(pod: dict) -> tuple[str | None, str | None]:
        ref = _controller(pod) or {}
        if job_obj and ref.get("uid") == _meta(job_obj).get("uid"):
            return ("RayJob", "submitter") if submitter else ("Job", None)
        if ray_obj and ref.get("kind") == "RayCluster" and cluster and ref.get("name") == cluster:
            return "RayJob", (_meta(pod).get("labels") or {}).get("ray.io/node-type") or None
        return None, None

    def workload_owner(wl: dict) -> str | None:
        for kind, obj in (("Job", job_obj), ("RayJob", ray_obj)):
            if obj and (owned_by(wl, obj) or (_meta(wl).get("labels") or {}).get("kueue.x-k8s.io/job-uid")
                        == _meta(obj).get("uid")):
                return "RayJob" if kind == "Job" and submitter else kind
        return None

    pod_list = [pod_section(p, *pod_owner(p)) for p in (pods.value if pods.state == OBSERVED else [])]
    pod_list.sort(key=lambda p: (str(p["name"]), str(p["uid"])))
    wl_list = [workload_section(w, workload_owner(w)) for w in (workloads.value if workloads.state == OBSERVED
                                                                else [])]
    wl_list.sort(key=lambda w: str(w["name"]))

    # each workload's own verdict, judged only with its own pods and Kueue Workloads
    verdicts: dict[str, dict] = {}
    if job_obj is not None and not submitter:
        state, detail, failure = job_state(job_obj)
        verdicts["Job"] = {"state": state, "detail": detail, "problems": [failure] if failure else []}
    if ray_obj is not None:
        state, detail, failure, app = rayjob_state(ray_obj)
        verdicts["RayJob"] = {"state": state, "detail": detail,
                              "problems": [p for p in (failure, app) if p]}
    elif submitter:  # the Job says it belongs to a RayJob we may not read
        verdicts["RayJob"] = {"state": "unknown", "detail": f"the Job {name!r} is the submitter of RayJob "
                              f"{job_owner_ray.get('name')!r}, which cannot be read: {rayjob.reason}",
                              "problems": []}
    job_verdict = verdicts.get("Job")
    job_pods = [p for p in pod_list if p["owner"] == "Job"]
    if job_verdict and job_verdict["state"] == "running" and pods.state == OBSERVED and job_pods \
            and not any(p["phase"] != "Pending" for p in job_pods):
        # the Job counts pods that wait for a node or an image as active: they are not running yet
        job_verdict["state"] = "pending"
        job_verdict["detail"] = f"{len(job_pods)} pod{'s' if len(job_pods) != 1 else ''} waiting to start"
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
    for wl in wl_list:
        if wl["owner"] in verdicts:
            verdicts[wl["owner"]]["problems"].extend(workload_problems(wl))

    if job_obj is not None and ray_obj is not None:
        kind = "RayJob" if submitter else "Job+RayJob"
    elif job_obj is not None:
        kind = "RayJob" if submitter else "Job"
    else:
        kind = "RayJob" if ray_obj is not None else "Unknown"
    primary = {"Job": "Job", "Job+RayJob": "Job", "RayJob": "RayJob"}.get(kind)
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

    sections = {}
    if job_obj is not None:
        # a submitter Job is part of its RayJob, which carries the verdict: the Job's own state, never degraded
        own = verdicts.get("Job")
        if own is None:
            own_state, own_detail, _ = job_state(job_obj)
            own = {"state": own_state, "detail": own_detail, "problems": []}
        sections["job"] = job_section(job_obj, (job_owner_ray or {}).get("name") if submitter else None, own)
    if ray_obj is not None:
        sections["rayJob"] = rayjob_section(ray_obj, verdicts["RayJob"])
    doc = {
        "schemaVersion": SCHEMA_VERSION,
        "name": name, "namespace": namespace, "kind": kind,
        "state": state, "stateDetail": detail,
        "degraded": bool(problems),
        "reason": "; ".join(problems) if problems else None,
        "issues": problems,
        "asOf": _as_of(job_obj, ray_obj, pods.value if pods.state == OBSERVED else [],
                       workloads.value if workloads.state == OBSERVED else []),
        "observations": {"job": _observation(job), "rayJob": _observation(rayjob),
                         "workloads": _observation(workloads), "pods": _observation(pods)},
        "phases": phases(kind, primary, state, job_obj if primary == "Job" else None,
                         ray_obj if primary == "RayJob" else None,
                         [w for w in wl_list if w["owner"] == primary], workloads,
                         [p for p in pod_list if p["owner"] == primary], pods),
        "job": sections.get("job"),
        "rayJob": sections.get("rayJob"),
        "workloads": wl_list,
        "pods": pod_list,
    }
    return doc


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


# -- phases: where along its way the workload is -------------------------------------------------------------------

def _phase(name: str, status: str, detail: str, hint: str | None = None) -> dict:
    return {"name": name, "status": status, "detail": detail, "hint": hint}


def phases(kind: str, primary: str | None, state: str, job: dict | None, ray: dict | None, wls: list[dict],
           wl_read: Read, pods: list[dict], pod_read: Read) -> list[dict]:
    if primary is None:
        return []
    obj = job if primary == "Job" else ray
    out = []
    if obj is None:  # the submitter of a RayJob that cannot be read
        return [_phase("Submitted", "warning", "the RayJob cannot be read")]
    out.append(_phase("Submitted", "done", f"{primary} created {_meta(obj).get('creationTimestamp') or ''}".strip()))
    out.append(_kueue_phase(obj, wls, wl_read, state))
    if any(w["workerCluster"] or w["nominatedClusters"] for w in wls):
        placed = next((w["workerCluster"] for w in wls if w["workerCluster"]), None)
        nominated = sorted({c for w in wls for c in w["nominatedClusters"]})
        out.append(_phase("MultiKueue placement", "done" if placed else "active",
                          f"running on worker cluster {placed}" if placed else
                          f"nominated: {', '.join(nominated)}"))
    if primary == "RayJob":
        deployment = _status(ray).get("jobDeploymentStatus") or ""
        cluster = _status(ray).get("rayClusterName")
        if deployment in ("", "New", "Suspended", "Suspending", "Waiting"):
            out.append(_phase("RayCluster", "pending", "not created yet"))
        elif deployment in ("Initializing", "Retrying"):
            out.append(_phase("RayCluster", "active", f"{cluster or 'the RayCluster'} is starting"))
        else:
            out.append(_phase("RayCluster", "done", f"{cluster or 'the RayCluster'} was created"))
    out.extend(_pod_phases(pods, pod_read, state))
    if primary == "RayJob":
        st = _status(ray)
        status = {"succeeded": "done", "failed": "warning"}.get(state, "active")
        out.append(_phase("RayJob status", status, f"jobDeploymentStatus {st.get('jobDeploymentStatus') or 'unset'}, "
                          f"jobStatus {st.get('jobStatus') or 'unset'}"
                          + (f", reason {st['reason']}" if st.get("reason") else "")))
    if state in ("succeeded", "failed"):
        out.append(_release_phase(pods, pod_read, wls))
    return out


def _kueue_phase(obj: dict, wls: list[dict], wl_read: Read, state: str) -> dict:
    name = "Kueue admission"
    queue = (_meta(obj).get("labels") or {}).get(QUEUE_LABEL)
    if wl_read.state == UNAVAILABLE:  # never "not admitted" from a read we could not make
        return _phase(name, "warning", f"cannot tell: {wl_read.reason}")
    if not wls:
        if wl_read.state == NOT_FOUND and queue:
            return _phase(name, "warning", f"it names queue {queue!r}, but Kueue is not installed",
                          "install Kueue, or remove the kueue.x-k8s.io/queue-name label")
        if wl_read.state == NOT_FOUND:
            return _phase(name, "skipped", "not queued by Kueue (Kueue is not installed)")
        if not queue:
            return _phase(name, "skipped", f"not queued by Kueue (no {QUEUE_LABEL} label)")
        if state in TERMINAL:
            return _phase(name, "skipped", f"queue {queue!r}: no Kueue Workload is left")
        return _phase(name, "active", f"queue {queue!r}: Kueue has not created a Workload yet",
                      "check that Kueue runs and that the LocalQueue exists in this namespace")
    wl = wls[-1]
    where = f"ClusterQueue {wl['clusterQueue']}" if wl["clusterQueue"] else f"queue {wl['queue']}"
    explained = ": ".join(p for p in (wl["reason"], wl["message"]) if p)
    if wl["phase"] == "Pending":
        return _phase(name, "active", f"pending in queue {wl['queue']}" + (f": {explained}" if explained else ""),
                      "the ClusterQueue lacks free quota or the LocalQueue does not exist")
    if wl["phase"] == "QuotaReserved":
        waiting = [c["name"] for c in wl["admissionChecks"] if c["state"] != "Ready"]
        return _phase(name, "active", f"quota reserved in {where}; waiting for admission checks: "
                      f"{', '.join(waiting) or 'none'}")
    if wl["phase"] == "Evicted":
        return _phase(name, "warning", f"evicted from {where}" + (f": {explained}" if explained else ""))
    if any(c["state"] == "Rejected" for c in wl["admissionChecks"]):
        return _phase(name, "warning", "an admission check rejected it")
    detail = f"admitted to {where}" if wl["phase"] == "Admitted" else f"finished in {where}" + (
        f": {explained}" if explained else "")
    return _phase(name, "done", detail)


def _pod_phases(pods: list[dict], pod_read: Read, state: str) -> list[dict]:
    names = ("Pod scheduling", "Image pull", "Init containers", "Container start", "Ready")
    if pod_read.state == UNAVAILABLE:
        return [_phase(n, "warning", f"cannot tell: {pod_read.reason}") for n in names[:1]]
    if not pods:
        status = "skipped" if state in TERMINAL else "pending"
        return [_phase(names[0], status, "no pods" + (" left" if state in TERMINAL else " yet"))]
    out = []
    unscheduled = [p for p in pods if any(c["type"] == "PodScheduled" and c["status"] == "False"
                                          for c in p["conditions"])]
    if unscheduled:
        cond = next(c for c in unscheduled[0]["conditions"] if c["type"] == "PodScheduled")
        out.append(_phase(names[0], "warning" if cond["reason"] == "Unschedulable" else "active",
                          f"{len(unscheduled)} pod(s) not scheduled: {_explain(cond, 'waiting')}",
                          "check node selectors, tolerations and free capacity"))
    else:
        nodes = sorted({p["node"] for p in pods if p["node"]})
        out.append(_phase(names[0], "done" if nodes else "active",
                          f"on node{'s' if len(nodes) != 1 else ''} {', '.join(nodes)}" if nodes else "waiting"))
    containers = [(p, c) for p in pods for c in p["containers"]]
    pulling = [f"{p['name']}/{c['name']} {c['reason']}" for p, c in containers
               if c["state"] == "waiting" and c["reason"] in IMAGE_ISSUES]
    started = [(p, c) for p, c in containers if c["state"] != "waiting" or c["restartCount"] or c["lastReason"]]
    if pulling:
        out.append(_phase(names[1], "warning", "; ".join(pulling), "check the image name and the pull secret"))
    elif started:
        out.append(_phase(names[1], "done", "images pulled"))
    else:
        out.append(_phase(names[1], "active" if not unscheduled else "pending", "waiting"))
    inits = [(p, c) for p, c in containers if c["kind"] == "init"]
    if not inits:
        out.append(_phase(names[2], "skipped", "no init containers"))
    else:
        bad = [_issue_text(p["name"], c) for p, c in inits if container_issue(c)]
        done = all(c["state"] == "terminated" and c["exitCode"] == 0 or c["state"] == "running" for _, c in inits)
        out.append(_phase(names[2], "warning" if bad else "done" if done else "active",
                          "; ".join(bad) if bad else "done" if done else "running"))
    apps = [(p, c) for p, c in containers if c["kind"] == "app"]
    failing = [_issue_text(p["name"], c) for p, c in apps if c["state"] == "waiting"
               and c["reason"] in WAITING_ISSUES - IMAGE_ISSUES - {"CrashLoopBackOff"}]
    begun = [c for _, c in apps if c["state"] != "waiting" or c["restartCount"]]
    if failing:
        out.append(_phase(names[3], "warning", "; ".join(failing), "check the command, the config maps and secrets "
                          "it mounts, and its volumes"))
    else:
        out.append(_phase(names[3], "done" if apps and len(begun) == len(apps) else "active" if begun else "pending",
                          f"{len(begun)}/{len(apps)} containers started"))
    crashing = [_issue_text(p["name"], c) for p, c in apps if c["state"] == "waiting"
                and c["reason"] == "CrashLoopBackOff"]
    live = [p for p in pods if p["phase"] == "Running"]
    ready = [p for p in live if p["ready"].split("/")[0] == p["ready"].split("/")[1]]
    if crashing:
        out.append(_phase(names[4], "warning", "; ".join(crashing), "read its logs: kubectl logs --previous"))
    elif state in TERMINAL:
        out.append(_phase(names[4], "done" if state == "succeeded" else "skipped", "finished"))
    else:
        out.append(_phase(names[4], "done" if live and len(ready) == len(live) else "active",
                          f"{len(ready)}/{len(live)} running pods ready"))
    return out


def _release_phase(pods: list[dict], pod_read: Read, wls: list[dict]) -> dict:
    name = "Compute release"
    if pod_read.state == UNAVAILABLE:
        return _phase(name, "warning", f"cannot tell: {pod_read.reason}")
    holding = [p for p in pods if p["phase"] in ("Running", "Pending") and p["node"]]
    if holding:
        nodes = sorted({p["node"] for p in holding})
        return _phase(name, "warning", f"{len(holding)} pod(s) still hold {len(nodes)} node(s): {', '.join(nodes)}",
                      "resources are not reusable until they end")
    quota = any(w["phase"] in ("Admitted", "QuotaReserved", "Evicted") for w in wls)
    return _phase(name, "active" if quota else "done",
                  "pods ended; Kueue still holds the quota" if quota else "pods ended; resources released")
