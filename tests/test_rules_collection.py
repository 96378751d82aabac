"""taulib.rules.collection: a collection job that ended with tasks unfinished reruns them, asking for more after an
out-of-memory or timeout end as far as the plan's retry.escalate allows, and fails when a rerun would ask the same
request that was killed; any other end reruns the same request, a bounded number of times."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from taulib.rules.collection import Next, after_job
from taulib.rules.escalation import mem_mib, time_seconds

GROW = {"mem": 4, "max_mem": "1G", "time": 2, "max_time": "2:00:00"}
ASKED = {"mem": "64M", "time": "30:00"}
ADVICE = ("a rerun would ask the same and be killed the same; collect from a new run (tau-init --from) whose plan "
          "asks for more")


def after(ends, asked=ASKED, escalate=GROW, reruns=0, most=3, count=4):
    return after_job(ends, asked, escalate, reruns, most, count)


def test_an_out_of_memory_task_is_rerun_asking_for_its_memory_grown_by_retry_escalate():
    assert after({2: "out_of_memory"}) == Next("rerun", {"mem": "256M", "time": "30:00"},
                                                {2: {"mem": "256M", "time": "30:00"}})
    assert after({2: "out_of_memory"}, {"mem": "256M", "time": "30:00"}).request["mem"] == "1G"
    assert after({2: "out_of_memory"}, {"mem": "512M", "time": None}).request == {"mem": "1G", "time": None}  # capped


def test_an_out_of_memory_task_without_growth_fails_the_collection_at_once_with_out_of_memory():
    for escalate in (None, {}, {"time": 2}, {"mem": 1}):
        found = after({2: "out_of_memory"}, escalate=escalate)
        assert (found.action, found.cause, found.request) == ("fail", "OUT_OF_MEMORY", ASKED), escalate
        assert found.reason == ("task 2 of 4 ran out of memory (OUT_OF_MEMORY) asking for 64M, and retry.escalate "
                                f"grows no memory: {ADVICE}")


def test_an_out_of_memory_task_at_the_cap_fails_the_collection_naming_the_cap():
    for asked in ({"mem": "1G", "time": None}, {"mem": "1024", "time": None}, {"mem": "2G", "time": None}):
        found = after({0: "out_of_memory"}, asked, count=1)
        assert (found.action, found.cause) == ("fail", "OUT_OF_MEMORY"), asked
        assert found.reason == (f"task 0 of 1 ran out of memory (OUT_OF_MEMORY) asking for {asked['mem']}, the cap "
                                f"(retry.escalate.max_mem): {ADVICE}")
        assert found.grown == {0: asked}  # a grant past the cap never shrinks


def test_an_out_of_memory_task_that_asked_for_no_memory_fails_since_a_request_is_never_invented():
    found = after({1: "out_of_memory"}, {"mem": None, "time": "30:00"})
    assert (found.action, found.cause) == ("fail", "OUT_OF_MEMORY")
    assert found.reason.startswith("task 1 of 4 ran out of memory (OUT_OF_MEMORY) asking for no memory of its own "
                                   "(the cluster's default), which retry.escalate never grows: ")


def test_a_timed_out_task_is_rerun_with_its_time_grown_or_fails_with_timeout():
    assert after({3: "timed_out"}) == Next("rerun", {"mem": "64M", "time": "01:00:00"},
                                             {3: {"mem": "64M", "time": "01:00:00"}})
    capped = after({3: "timed_out"}, {"mem": "64M", "time": "2:00:00"})
    assert (capped.action, capped.cause) == ("fail", "TIMEOUT")
    assert capped.reason == (f"task 3 of 4 ran out of time (TIMEOUT) asking for 2:00:00, the cap "
                             f"(retry.escalate.max_time): {ADVICE}")
    plain = after({3: "timed_out"}, escalate={"mem": 2})
    assert (plain.action, plain.cause) == ("fail", "TIMEOUT")
    assert "asking for 30:00, and retry.escalate grows no time: " in plain.reason
    unset = after({3: "timed_out"}, {"mem": "64M", "time": None})
    assert "asking for no time of its own (the cluster's default)" in unset.reason


def test_killed_cancelled_preempted_lost_failed_or_unknown_tasks_keep_todays_rerun_at_the_same_request():
    for end in ("cancelled", "preempted", "node_failed", "failed", "completed", None):
        for escalate in (GROW, None):
            assert after({1: end}, escalate=escalate) == Next("rerun", ASKED, {1: ASKED}), (end, escalate)
    # at the cap, or with nothing that grows, a cancelled task is still rerun: only a kill for memory or time stops
    at_cap = {"mem": "1G", "time": "2:00:00"}
    assert after({1: "cancelled", 2: "preempted"}, at_cap).action == "rerun"


def test_one_array_asks_for_the_largest_request_of_its_tasks_memory_and_time_each():
    found = after({0: "cancelled", 1: "out_of_memory", 2: "timed_out", 3: None})
    assert found.action == "rerun"
    assert found.request == {"mem": "256M", "time": "01:00:00"}
    assert found.grown == {0: ASKED, 1: {"mem": "256M", "time": "30:00"}, 2: {"mem": "64M", "time": "01:00:00"},
                           3: ASKED}
    # the largest by size, not by spelling: 1536M is more than 1G
    assert after({0: "out_of_memory", 1: "failed"}, {"mem": "384M", "time": None},
                 {"mem": 4}).request == {"mem": "1536M", "time": None}
    # no task set a request: none is invented
    assert after({0: "cancelled", 1: "failed"}, {"mem": None, "time": None}).request == {"mem": None, "time": None}


def test_one_task_that_cannot_grow_fails_the_collection_whatever_the_others_did():
    found = after({0: "cancelled", 1: "out_of_memory", 2: "out_of_memory", 3: "timed_out"},
                  {"mem": "1G", "time": "30:00"})
    assert (found.action, found.cause) == ("fail", "OUT_OF_MEMORY")
    assert found.reason.startswith("tasks 1, 2 of 4 ran out of memory (OUT_OF_MEMORY) asking for 1G, the cap ")
    stuck_time = after({0: "out_of_memory", 3: "timed_out"}, {"mem": "64M", "time": "2:00:00"})
    assert (stuck_time.action, stuck_time.cause) == ("fail", "TIMEOUT")  # memory could grow; time cannot


def test_reruns_are_bounded_whatever_ended_the_tasks_and_the_reason_counts_their_ends():
    assert after({1: "cancelled"}, reruns=2).action == "rerun"
    spent = after({1: "cancelled", 2: None}, reruns=3)
    assert spent == Next("fail", ASKED, {1: ASKED, 2: ASKED}, None,
                         "tasks 1, 2 of 4 never finished, in 4 jobs (the last ended cancelled 1, unknown to "
                         "accounting 1)")
    grew = after({1: "cancelled", 2: "timed_out", 3: "out_of_memory"}, reruns=3)
    assert (grew.action, grew.cause) == ("fail", "OUT_OF_MEMORY")  # memory named before time
    assert grew.reason.endswith("in 4 jobs (the last ended cancelled 1, timed_out 1, out_of_memory 1)")
    assert after({2: "timed_out"}, reruns=3).cause == "TIMEOUT"
    assert after({0: "failed"}, reruns=0, most=0).action == "fail"


def test_many_tasks_are_named_twenty_at_most():
    found = after({t: "out_of_memory" for t in range(25)}, escalate=None, count=30)
    assert found.reason.startswith("tasks 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19 and 5 "
                                   "more of 30 ran out of memory (OUT_OF_MEMORY) ")


ENDS = st.sampled_from(["out_of_memory", "timed_out", "cancelled", "preempted", "node_failed", "failed", None])
MEMS = st.sampled_from([None, "64M", "100M", "512M", "1G", "1536M", "2G", "4096"])
TIMES = st.sampled_from([None, "10", "30:00", "1:00:00", "2:00:00", "1-00:00:00"])
FACTORS = st.sampled_from([1, 1.5, 2, 4])


@given(st.dictionaries(st.integers(0, 999), ENDS, min_size=1, max_size=12), MEMS, TIMES,
       st.fixed_dictionaries({}, optional={"mem": FACTORS, "time": FACTORS,
                                           "max_mem": st.sampled_from(["256M", "1G", "8G"]),
                                           "max_time": st.sampled_from(["1:00:00", "1-00:00:00"])}),
       st.integers(0, 4))
def test_a_request_killed_for_memory_or_time_is_never_asked_again(ends, mem, time, escalate, reruns):
    asked = {"mem": mem, "time": time}
    found = after(ends, asked, escalate, reruns=reruns, count=1000)
    killed_for = {state for state in ends.values() if state in ("out_of_memory", "timed_out")}
    if found.action == "fail":
        assert found.request == asked
        assert found.cause is not None or not killed_for or reruns >= 3
        return
    assert reruns < 3
    for state, key, read in (("out_of_memory", "mem", mem_mib), ("timed_out", "time", time_seconds)):
        if state in killed_for:  # more than was killed, for every task of the array
            assert found.request[key] is not None and read(found.request[key]) > read(asked[key])
        else:
            assert found.request[key] == asked[key]
    for task, state in ends.items():
        if state not in killed_for:
            assert found.grown[task] == asked
