"""taulib.table: the tables people read (`-o table`), rendered from documents written out here: what a run's
efficiency summary and a shard's USED cell say of memory asked for and never measured, and the REASON column."""

from __future__ import annotations

from taulib import table
from taulib.rules import efficiency

MIB = 1024 ** 2
NOTE = "memory not measured (job shorter than the sampling period; --acctg-freq=task=1 measures it)"


def figures(shard: int, elapsed: float = 10.2, cpu: float = 0.3, rss: int | None = None,
            requested: int | None = 256 * MIB) -> dict:
    return {"shard_id": f"shard-{shard:05d}", "attempt_id": "attempt-0001", "state": "COMPLETED", "source": "sacct",
            "elapsed_seconds": elapsed, "cpu_seconds": cpu, "cpus": 1, "gpus": 0, "max_rss_bytes": rss,
            "mem_requested_bytes": requested, "time_limit_seconds": 300.0}


def shard(number: int, usage: dict | None = None, request: dict | None = None, state: str = "failed",
          reason: str = "the client exited with status 3", scheduler: str | None = None) -> dict:
    observation = None if scheduler is None else {"state": scheduler, "terminal": False}
    return {"id": f"shard-{number:05d}", "state": state, "reason": reason, "attempt": "attempt-0001", "winner": None,
            "attempts": 1, "max_attempts": 3, "log": None, "progress": None, "stalled": None,
            "evidence": {"attempt_state": "submitted", "observation": observation},
            "usage": usage, "request": request}


def doc(shards: list[dict], measured: list[dict]) -> dict:
    return {"run_id": "r", "state": "running", "counts": {"running": len(shards)}, "degraded": False,
            "cancelled": None, "budget": None, "submissions": [], "collections": [], "eta_seconds": None,
            "sources": None, "efficiency": efficiency.summary(measured, 0), "shards": shards}


def rows(text: str) -> dict[str, str]:
    return {line.split()[0]: line for line in text.splitlines() if line.startswith("shard-")}


def used(text: str, sid: str = "shard-00000") -> str:
    """The USED cell of shard `sid`, cut at the header's columns."""
    header = next(line for line in text.splitlines() if line.startswith("SHARD "))
    return rows(text)[sid][header.index("USED"):header.index("REASON")].strip()


def test_memory_asked_for_and_never_measured_says_so_in_the_summary_and_in_the_shards_used_cell():
    short = figures(0)
    text = table.status(doc([shard(0, efficiency.attempt(short), {"mem": "256M", "time": "5:00"})], [short]))
    assert f"  CPU 2.9% of the cores' time; {NOTE}\n" in text
    assert "no memory requested" not in text
    assert used(text) == "10.2s cpu 3% memory not measured of 256.0 MiB"


def test_no_memory_requested_only_when_no_measured_attempt_asked_for_any():
    local = figures(0, rss=64 * MIB, requested=None)
    text = table.status(doc([shard(0, efficiency.attempt(local), {"mem": None, "time": None})], [local]))
    assert "; no memory requested, peak 64.0 MiB\n" in text
    assert used(text) == "10.2s cpu 3% 64.0 MiB"


def test_a_run_with_measured_and_unmeasured_memory_gives_the_mean_and_counts_the_rest():
    measured = [figures(0, rss=128 * MIB), figures(1), figures(2)]
    shards = [shard(i, efficiency.attempt(f)) for i, f in enumerate(measured)]
    text = table.status(doc(shards, measured))
    assert ("; memory 50.0% of the request on average (at most 50.0%); memory of 2 attempts not measured (job "
            "shorter than the sampling period; --acctg-freq=task=1 measures it), peak 128.0 MiB\n") in text
    assert used(text) == "10.2s cpu 3% 128.0 MiB (50% of 256.0 MiB)"
    assert used(text, "shard-00001") == "10.2s cpu 3% memory not measured of 256.0 MiB"


def test_the_used_cell_reads_the_request_from_the_shard_when_its_usage_has_none():
    unknown = figures(0, rss=None, requested=None)
    text = table.status(doc([shard(0, efficiency.attempt(unknown), {"mem": "2G", "time": "1:00:00"})], [unknown]))
    assert used(text) == "10.2s cpu 3% memory not measured of 2G"
    peaked = figures(0, rss=100 * MIB, requested=None)
    text = table.status(doc([shard(0, efficiency.attempt(peaked), {"mem": "2G", "time": None})], [peaked]))
    assert used(text) == "10.2s cpu 3% 100.0 MiB of 2G"


def test_a_task_that_never_started_has_nothing_to_measure():
    never = figures(0, elapsed=0, cpu=0)
    text = table.status(doc([shard(0, efficiency.attempt(never), {"mem": "256M", "time": None})], [never]))
    assert "no memory requested" in text and "not measured" not in text
    assert used(text) == "0.0s"


def test_the_reason_column_says_why_a_queued_task_waits():
    waiting = "queued (JobArrayTaskLimit: the array's %N throttle, scheduler.slurm.max_parallel)"
    text = table.status(doc([shard(0, None, {"mem": "256M", "time": "5:00"}, "pending", waiting, "pending")], []))
    assert rows(text)["shard-00000"].split(None, 8) == ["shard-00000", "pending", "attempt-0001", "-", "1/3",
                                                         "pending", "-", "-", waiting]
