"""The limits a Slurm cluster sets on what one user may queue, read before every submission: how large an array may
be, and how many more tasks this user may have queued now.

Reads (through `slurm.commands`, each with its timeout, never through a shell):
  scontrol show config       MaxArraySize (the largest array task index is one less), MaxJobCount,
                             AccountingStorageEnforce (association and QOS limits apply only with `limits`)
  sacctmgr show user/assoc   the job's account (the plan's, else the user's default), the user's association for
                             it and the account rows above it: MaxSubmitJobs (a user's own, else inherited from the
                             nearest account that sets it) and GrpSubmitJobs (of the user's association, and of each
                             account above it, counted over the account's jobs)
  sacctmgr show qos          the job's QOS (the plan's, else the association's default, else `normal`):
                             MaxSubmitJobsPerUser, MaxSubmitJobsPerAccount, GrpSubmitJobs
  squeue --user / --account / --qos   the jobs that count against each limit now (an array's pending tasks count
                             one each, as Slurm counts them against submit limits)
and the plan's own cap, `scheduler.slurm.max_queued`, counted over the run's own queued tasks. Writes nothing.
Promises: a limit that cannot be read (no accounting, sacctmgr denied or down) is never guessed: it is named in
`Capacity.unread`, and the limits that could be read still apply; the room left is the smallest over every limit
that applies, with the one that holds it named in words. The parsing and the arithmetic are pure functions (tested
on captured output); only `read` runs commands.
"""

from __future__ import annotations

import os
import pwd
import re
from typing import NamedTuple

from taulib.errors import Unavailable
from taulib.executors import Capacity
from taulib.executors.slurm import commands, parse

SUBMIT_LIMITS = ("limits", "safe")  # AccountingStorageEnforce words under which submit limits are enforced
LEAST_SHARE = 10  # a window waits until a tenth of the tightest limit is free (or it takes every shard left)


class Limit(NamedTuple):
    """One limit on the tasks that may be queued: its value, how many count against it now, and whose it is."""
    name: str  # MaxSubmitJobs, GrpSubmitJobs, MaxSubmitJobsPerUser, ..., max_queued
    value: int
    used: int
    scope: str  # "user root's association (account root)", "QOS normal", "the plan"

    @property
    def room(self) -> int:
        return max(self.value - self.used, 0)

    def words(self) -> str:
        return f"{self.name}={self.value} of {self.scope} ({self.used} queued)"


def config_values(text: str) -> dict[str, str]:
    """`scontrol show config` as {key: value} (lines `Key = Value`)."""
    values = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep and key.strip() and " " not in key.strip():
            values[key.strip()] = value.strip()
    return values


def number(text: str) -> int | None:
    """A limit's value as sacctmgr or scontrol prints it: digits, or nothing / `(null)` / `-1` for none."""
    text = text.strip()
    return int(text) if _DIGITS.fullmatch(text) else None


_DIGITS = re.compile(r"[0-9]{1,18}")  # a limit of more digits than any counter holds is no limit tau can read


def rows(text: str, fields: tuple[str, ...]) -> list[dict[str, str]]:
    """`sacctmgr -n -P ... format=<fields>` as dicts; a line with another field count is refused (ParseError)."""
    out = []
    for line in text.splitlines():
        if not line.strip():
            continue
        values = line.split("|")
        if values and values[-1] == "" and len(values) == len(fields) + 1:  # -P ends each line with a "|"
            values = values[:-1]
        if len(values) != len(fields):
            raise parse.ParseError(f"sacctmgr printed {len(values)} fields, expected {len(fields)}: {line!r}")
        out.append(dict(zip(fields, values, strict=True)))
    return out


class Queued(NamedTuple):
    """One task this user (or account, or QOS) has queued: its job id, account, QOS and partition."""
    job_id: str
    account: str
    qos: str
    partition: str


def queued_rows(text: str) -> list[Queued]:
    """`squeue --noheader --array --format=%i|%a|%q|%P`, a pending array's unsplit tasks expanded one per task."""
    out: list[Queued] = []
    for fields, _line in parse.split_rows(text, 4, "squeue"):
        job, tasks = parse.job_fields(fields[0].strip())
        out.extend(Queued(job, fields[1].strip(), fields[2].strip(), fields[3].strip()) for _ in tasks)
    return out


def smallest(limits: list[Limit]) -> Limit | None:
    """The limit that leaves the least room (the first of equals), or None when there is none."""
    return min(limits, key=lambda limit: limit.room, default=None)


def capacity(config: dict[str, str], limits: list[Limit], unread: list[str]) -> Capacity:
    """The capacity these limits leave: arrays below MaxArraySize (and no larger than MaxJobCount), and the room
    the tightest submit limit leaves."""
    array_size = number(config.get("MaxArraySize", ""))
    job_count = number(config.get("MaxJobCount", ""))
    max_index = array_size - 1 if array_size else None
    max_tasks = min([n for n in (array_size, job_count) if n] or [0]) or None
    tightest = smallest(limits)
    return Capacity(max_index=max_index, max_tasks=max_tasks, room=None if tightest is None else tightest.room,
                    holding=None if tightest is None else tightest.words(), unread=list(unread),
                    least=None if tightest is None else max(1, tightest.value // LEAST_SHARE))


def enforced(config: dict[str, str]) -> bool:
    """Whether slurmctld enforces association and QOS submit limits (AccountingStorageEnforce with `limits`)."""
    words = config.get("AccountingStorageEnforce", "").lower().replace(" ", "").split(",")
    return any(word in SUBMIT_LIMITS for word in words)


ASSOC_FIELDS = ("account", "user", "partition", "maxsubmit", "grpsubmit", "parentname", "qos", "defaultqos")
QOS_FIELDS = ("name", "maxsubmitpu", "maxsubmitpa", "grpsubmit")


def association_limits(user: str, account: str, partition: str | None, own: list[dict[str, str]],
                       chain: list[dict[str, str]], mine: list[Queued], of_account: dict[str, list[Queued]]
                       ) -> tuple[list[Limit], str | None]:
    """The association limits on the job of `user` in `account` (and `partition`): its own association row (`own`:
    the user's rows; one of the partition, else the one without), the account rows above it (`chain`, nearest
    first), the user's queued tasks (`mine`) and each account's (`of_account`). Returns the limits and the
    association's default QOS."""
    candidates = [r for r in own if r["account"] == account]
    row = next((r for r in candidates if partition and r["partition"] == partition), None) \
        or next((r for r in candidates if not r["partition"]), None)
    if row is None:
        return [], None
    scope = f"user {user}'s association (account {account})"
    in_account = [q for q in mine if q.account == account]
    limits = []
    max_submit = number(row["maxsubmit"])
    inherited_from = None
    for parent in chain:  # a user's MaxSubmitJobs is inherited from the nearest account that sets it
        if max_submit is not None:
            break
        max_submit, inherited_from = number(parent["maxsubmit"]), parent["account"]
    if max_submit is not None:
        where = scope if inherited_from is None else f"{scope}, inherited from account {inherited_from}"
        limits.append(Limit("MaxSubmitJobs", max_submit, len(in_account), where))
    if number(row["grpsubmit"]) is not None:
        limits.append(Limit("GrpSubmitJobs", number(row["grpsubmit"]) or 0, len(in_account), scope))
    for parent in chain:
        value = number(parent["grpsubmit"])
        if value is not None:
            used = len(of_account.get(parent["account"], []))
            limits.append(Limit("GrpSubmitJobs", value, used, f"account {parent['account']}"))
    return limits, row["defaultqos"] or None


def qos_limits(qos: str, row: dict[str, str] | None, mine: list[Queued], account: str,
               of_qos: list[Queued]) -> list[Limit]:
    """The limits of the job's QOS (`row`, None when the QOS is not listed) over the queued tasks that count."""
    if row is None:
        return []
    limits = []
    per_user = number(row["maxsubmitpu"])
    if per_user is not None:
        limits.append(Limit("MaxSubmitJobsPerUser", per_user, sum(1 for q in mine if q.qos == qos), f"QOS {qos}"))
    per_account = number(row["maxsubmitpa"])
    if per_account is not None:
        used = sum(1 for q in of_qos if q.account == account)
        limits.append(Limit("MaxSubmitJobsPerAccount", per_account, used, f"QOS {qos}, account {account}"))
    group = number(row["grpsubmit"])
    if group is not None:
        limits.append(Limit("GrpSubmitJobs", group, len(of_qos), f"QOS {qos}"))
    return limits


# -- reading them from the cluster ------------------------------------------------------------------------------

def _ask(argv: list[str], what: str) -> str:
    proc = commands.run_query(argv)
    if proc.returncode != 0:
        raise Unavailable(f"{what} failed: {commands.short(proc.stderr) or f'exit {proc.returncode}'}")
    return proc.stdout


def _queue(selector: str) -> list[Queued]:
    text = _ask(["squeue", "--noheader", "--array", "--format=%i|%a|%q|%P", selector], "squeue")
    try:
        return queued_rows(text)
    except parse.ParseError as exc:
        raise Unavailable(f"squeue printed something tau cannot read: {exc}") from None


def read(profile: dict[str, object], run_jobs: set[str]) -> Capacity:
    """The capacity the cluster's limits (and the plan's `max_queued`, over `run_jobs`, the run's job ids) leave
    now. Unavailable only when `scontrol show config` cannot be read (then nothing about the cluster is known)."""
    try:
        config = config_values(_ask(["scontrol", "show", "config"], "scontrol show config"))
    except Unavailable as exc:
        raise Unavailable(f"the cluster's limits cannot be read: {exc.message}") from None
    uid = os.getuid()
    mine = _queue(f"--user={uid}")
    limits: list[Limit] = []
    unread: list[str] = []
    cap = profile.get("max_queued")
    if isinstance(cap, int):
        limits.append(Limit("max_queued", cap, sum(1 for q in mine if q.job_id in run_jobs), "the plan"))
    if not enforced(config):
        return capacity(config, limits, unread)
    try:
        limits += _accounting_limits(config, profile, pwd.getpwuid(uid).pw_name, mine)
    except (Unavailable, parse.ParseError, KeyError) as exc:
        unread.append(f"association and QOS limits ({getattr(exc, 'message', None) or exc})")
    return capacity(config, limits, unread)


def _accounting_limits(config: dict[str, str], profile: dict[str, object], user: str,
                       mine: list[Queued]) -> list[Limit]:
    cluster = config.get("ClusterName", "")
    sacctmgr = ["sacctmgr", "--noheader", "--parsable"]
    account = profile.get("account") or next(
        (r["defaultaccount"] for r in rows(_ask([*sacctmgr, "show", "user", user, "format=defaultaccount"],
                                                "sacctmgr show user"), ("defaultaccount",))), "")
    if not isinstance(account, str) or not account:
        raise Unavailable(f"user {user} has no default account in slurmdbd")
    fields = f"format={','.join(ASSOC_FIELDS)}"
    own = rows(_ask([*sacctmgr, "show", "assoc", "where", f"user={user}", f"cluster={cluster}", fields],
                    "sacctmgr show assoc"), ASSOC_FIELDS)
    chain: list[dict[str, str]] = []
    name: str = account
    while name and len(chain) < 32:  # the account and those above it, nearest first
        found = [r for r in rows(_ask([*sacctmgr, "show", "assoc", "where", f"account={name}", f"cluster={cluster}",
                                       fields], "sacctmgr show assoc"), ASSOC_FIELDS) if not r["user"]]
        if not found:
            break
        chain.append(found[0])
        name = found[0]["parentname"]
    of_account = {r["account"]: _queue(f"--account={r['account']}") for r in chain if number(r["grpsubmit"])}
    partition = profile.get("partition")
    limits, default_qos = association_limits(user, account, partition if isinstance(partition, str) else None, own,
                                             chain, mine, of_account)
    qos = profile.get("qos") or default_qos or "normal"
    qos_rows = rows(_ask([*sacctmgr, "show", "qos", "where", f"name={qos}", f"format={','.join(QOS_FIELDS)}"],
                         "sacctmgr show qos"), QOS_FIELDS)
    row = next((r for r in qos_rows if r["name"] == qos), None)
    needs_all = row is not None and (number(row["grpsubmit"]) is not None or number(row["maxsubmitpa"]) is not None)
    limits += qos_limits(str(qos), row, mine, account, _queue(f"--qos={qos}") if needs_all else [])
    return limits



def partition_fields(text: str, wanted: str | None) -> dict[str, str] | None:
    """The fields (`Key=Value`) of partition `wanted` (None: the default one, `Default=YES`) in `scontrol show
    partition --oneliner` output; None when it is not there."""
    for line in text.splitlines():
        fields = dict(item.partition("=")[::2] for item in line.split() if "=" in item)
        if fields.get("PartitionName") and (fields["PartitionName"] == wanted
                                            or (wanted is None and fields.get("Default") == "YES")):
            return fields
    return None


def request_problem(request: dict[str, str], fields: dict[str, str], node_mib: list[int]) -> str | None:
    """Why a partition (its `scontrol show partition` fields, and its nodes' RealMemory in MiB from sinfo) could
    never give `request` ({mem and/or time}, Slurm's spelling), or None. Pure."""
    from taulib.rules.escalation import mem_mib, time_seconds

    name = fields.get("PartitionName", "?")
    if request.get("time") and fields.get("MaxTime", "UNLIMITED") not in ("UNLIMITED", "INFINITE"):
        try:
            most = parse.clock_seconds(fields["MaxTime"]) if ":" in fields["MaxTime"] else time_seconds(
                fields["MaxTime"])
        except (parse.ParseError, ValueError):
            most = None
        if most is not None and time_seconds(request["time"]) > most:
            return f"--time {request['time']} is more than partition {name}'s MaxTime={fields['MaxTime']}"
    if request.get("mem"):
        asked = mem_mib(request["mem"])
        cap = fields.get("MaxMemPerNode", "UNLIMITED")
        if cap.isdigit() and asked > int(cap):
            return f"--mem {request['mem']} is more than partition {name}'s MaxMemPerNode={cap} (MiB)"
        if node_mib and asked > max(node_mib):
            return f"--mem {request['mem']} is more than the largest node of partition {name} has ({max(node_mib)}M)"
    return None


def check_request(request: dict[str, str], partition: str | None) -> None:
    """BadInput when the partition (the plan's, else the cluster's default) could never give `request`; a partition
    whose limits cannot be read is not guessed about (sbatch decides)."""
    from taulib.errors import BadInput

    try:
        shown = commands.run_query(["scontrol", "show", "partition", "--oneliner"])
        nodes = commands.run_query(["sinfo", "--noheader", "--format=%m"]
                                   + ([f"--partition={partition}"] if partition else []))
    except Unavailable:
        return
    fields = partition_fields(shown.stdout, partition) if shown.returncode == 0 else None
    if fields is None:
        return
    node_mib = [int(m.rstrip("+")) for m in nodes.stdout.split() if m.rstrip("+").isdigit()] \
        if nodes.returncode == 0 else []
    problem = request_problem(request, fields, node_mib)
    if problem is not None:
        raise BadInput(f"cannot grant that: {problem}")


def missing_partitions(names: list[str]) -> list[str]:
    """The partitions of `names` the cluster does not have, each said as a problem; none when Slurm cannot be
    asked (nothing is guessed)."""
    try:
        shown = commands.run_query(["scontrol", "show", "partition", "--oneliner"])
    except Unavailable:
        return []
    if shown.returncode != 0:
        return []
    return [f"partition {name!r} does not exist on this cluster (scontrol show partition)" for name in names
            if partition_fields(shown.stdout, name) is None]
