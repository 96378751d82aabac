"""taulib.executors.slurm.limits: the cluster's limits on what one user may queue, parsed from what scontrol, sacctmgr
and squeue print (captured from Slurm 22.05), and the room they leave."""

from __future__ import annotations

import os

import pytest

from taulib.errors import Unavailable
from taulib.executors import Capacity
from taulib.executors.slurm import limits, parse
from taulib.executors.slurm.limits import Limit, Queued

CONFIG = """Configuration data as of 2026-12-04T16:19:30
AccountingStorageBackupHost = (null)
AccountingStorageEnforce = associations,limits
ClusterName             = taucluster
MaxArraySize            = 1001
MaxJobCount             = 10000
"""


def test_scontrol_show_config_gives_the_array_and_job_limits_and_whether_submit_limits_are_enforced():
    values = limits.config_values(CONFIG)
    assert values["MaxArraySize"] == "1001" and values["ClusterName"] == "taucluster"
    assert "Configuration data as of 2026-12-04T16" not in values  # not a Key = Value line
    assert limits.enforced(values)
    assert not limits.enforced({"AccountingStorageEnforce": "none"})
    assert not limits.enforced({"AccountingStorageEnforce": "associations"})
    assert limits.enforced({"AccountingStorageEnforce": "associations,limits,qos,safe"})
    assert not limits.enforced({})


def test_a_limit_prints_as_digits_or_as_nothing():
    assert limits.number("250") == 250 and limits.number(" 0 ") == 0
    assert limits.number("") is None and limits.number("(null)") is None and limits.number("-1") is None


def test_sacctmgr_rows_with_or_without_the_trailing_bar_and_a_wrong_field_count_refused():
    fields = ("account", "user", "maxsubmit")
    assert limits.rows("root|root|250|\nroot||\n", fields) == [
        {"account": "root", "user": "root", "maxsubmit": "250"}, {"account": "root", "user": "", "maxsubmit": ""}]
    with pytest.raises(parse.ParseError, match="expected 3"):
        limits.rows("root|root\n", fields)


def test_queued_tasks_count_an_unsplit_pending_arrays_tasks_one_each():
    rows = limits.queued_rows("101_[0-4%2]|lab|normal|debug\n102_7|lab|high|gpu\n103|other|normal|debug\n")
    assert len(rows) == 7
    assert rows[0] == Queued("101", "lab", "normal", "debug") and rows[5] == Queued("102", "lab", "high", "gpu")


def row(account: str, user: str = "", maxsubmit: str = "", grpsubmit: str = "", parent: str = "", partition: str = "",
        defaultqos: str = "") -> dict[str, str]:
    return {"account": account, "user": user, "partition": partition, "maxsubmit": maxsubmit, "grpsubmit": grpsubmit,
            "parentname": parent, "qos": "normal", "defaultqos": defaultqos}


MINE = [Queued("1", "lab", "normal", "debug")] * 240 + [Queued("2", "other", "normal", "debug")] * 5


def test_a_users_own_max_submit_jobs_counts_the_users_tasks_in_that_account():
    found, default_qos = limits.association_limits("alice", "lab", None, [row("lab", "alice", maxsubmit="250")],
                                                   [row("lab", parent="root"), row("root")], MINE, {})
    assert found == [Limit("MaxSubmitJobs", 250, 240, "user alice's association (account lab)")]
    assert found[0].room == 10 and default_qos is None
    assert found[0].words() == "MaxSubmitJobs=250 of user alice's association (account lab) (240 queued)"


def test_max_submit_jobs_is_inherited_from_the_nearest_account_and_group_limits_count_the_accounts_tasks():
    account_jobs = {"lab": [Queued("9", "lab", "normal", "debug")] * 900}
    found, _ = limits.association_limits(
        "alice", "lab", None, [row("lab", "alice")],
        [row("lab", parent="dept", grpsubmit="1000"), row("dept", parent="root", maxsubmit="300"), row("root")],
        MINE, account_jobs)
    assert found == [
        Limit("MaxSubmitJobs", 300, 240, "user alice's association (account lab), inherited from account dept"),
        Limit("GrpSubmitJobs", 1000, 900, "account lab")]
    assert limits.smallest(found) == found[0]  # 60 left beats 100


def test_the_partitions_own_association_is_taken_before_the_accounts_default_and_none_is_no_limit():
    own = [row("lab", "alice", maxsubmit="50"), row("lab", "alice", maxsubmit="10", partition="gpu")]
    assert limits.association_limits("alice", "lab", "gpu", own, [], MINE, {})[0][0].value == 10
    assert limits.association_limits("alice", "lab", "debug", own, [], MINE, {})[0][0].value == 50
    assert limits.association_limits("alice", "nolab", None, own, [], MINE, {}) == ([], None)


def test_qos_limits_count_the_users_and_the_accounts_and_everyones_tasks_in_that_qos():
    qos_row = {"name": "normal", "maxsubmitpu": "300", "maxsubmitpa": "400", "grpsubmit": "1000"}
    everyone = MINE + [Queued("3", "lab", "normal", "debug")] * 100
    found = limits.qos_limits("normal", qos_row, MINE, "lab", everyone)
    assert found == [Limit("MaxSubmitJobsPerUser", 300, 245, "QOS normal"),
                     Limit("MaxSubmitJobsPerAccount", 400, 340, "QOS normal, account lab"),
                     Limit("GrpSubmitJobs", 1000, 345, "QOS normal")]
    assert limits.qos_limits("normal", None, MINE, "lab", everyone) == []


def test_the_capacity_is_the_array_limit_and_the_tightest_room_with_the_unread_limits_named():
    config = limits.config_values(CONFIG)
    held = [Limit("max_queued", 500, 100, "the plan"), Limit("MaxSubmitJobs", 250, 245, "user alice's association")]
    assert limits.capacity(config, held, ["association and QOS limits (sacctmgr: access denied)"]) == Capacity(
        max_index=1000, max_tasks=1001, room=5, holding="MaxSubmitJobs=250 of user alice's association (245 queued)",
        unread=["association and QOS limits (sacctmgr: access denied)"], least=25)
    assert limits.capacity({}, [], []) == Capacity(None, None, None, None, [])
    over = limits.capacity(config, [Limit("MaxSubmitJobs", 250, 300, "x")], [])
    assert over.room == 0  # more queued than the limit (set after they were queued): no room, never negative


def test_a_limit_of_unbounded_or_non_ascii_digits_is_no_limit_tau_can_read_never_an_integer_error():
    assert limits.number("9" * 5000) is None and limits.number("²") is None and limits.number("1" * 19) is None
    assert limits.number("9" * 18) == 10 ** 18 - 1


def test_an_unreadable_squeue_row_in_the_users_queue_is_a_source_that_cannot_be_asked(tmp_path, monkeypatch):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    squeue = bin_dir / "squeue"
    squeue.write_text(f"#!/bin/sh\necho '7_{'9' * 5000}|acct|normal|debug'\n")
    squeue.chmod(0o700)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    with pytest.raises(Unavailable, match="squeue printed something tau cannot read: unexpected job id"):
        limits._queue("--user=0")
