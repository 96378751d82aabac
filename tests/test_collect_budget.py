"""tau-collect's memory budget (tau-collect(1) "Memory"): how it is spread (`collect.budget`, pure), how --memory
is checked and recorded, and that a real collection of a winner with one large row group stays within it, with
the same bytes whatever the budget."""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from pathlib import Path

import pytest

from helpers import BIN, PYTHON, complete_run, copy_run, env_for_tests, error_of, module_workspace, snapshot, tau

from taulib.collect import budget

MiB = 1 << 20
ROWS = 700_000  # one winner, one row group: ~150 MB of text that does not compress

CLIENT = """
import base64, hashlib, os
import pyarrow as pa, pyarrow.parquet as pq
start, end = int(os.environ["TAU_RECORD_START"]), int(os.environ["TAU_RECORD_END"])
chunks = []
for low in range(start, end, 100_000):
    ids = range(low, min(low + 100_000, end))
    chunks.append(pa.record_batch([pa.array(ids, pa.int64()), pa.array(
        [base64.b64encode(hashlib.shake_256(b"%d" % i).digest(150)).decode() for i in ids])], names=["id", "text"]))
table = pa.Table.from_batches(chunks)
pq.write_table(table, os.path.join(os.environ["TAU_OUTPUT_DIR"], "part-00000.parquet"), row_group_size=end - start)
"""


@pytest.fixture(scope="module")
def wide(tmp_path_factory) -> Path:
    """One winner of one row group of 700,000 rows (~150 MB), collected in partitions of 250,000 rows: the row group
    straddles them, so it is decoded, batch by batch."""
    workspace = module_workspace(tmp_path_factory, "collect-budget")
    client = workspace / "client.py"
    client.write_text(CLIENT)
    return complete_run(workspace, records=ROWS, shards=1, command=[PYTHON, str(client)],
                        scheduler={"profile": "local", "local": {"max_parallel": 1}},
                        output={"format": "parquet", "rows_per_partition": 250_000})


def test_sizes_are_read_in_binary_units_and_anything_else_is_not_a_size():
    assert [budget.parse(t) for t in ("256M", "256MiB", "1g", "1 GB", "300000000", "64K")] == \
        [256 * MiB, 256 * MiB, 1 << 30, 1 << 30, 300_000_000, 64 << 10]
    assert [budget.parse(t) for t in ("", "M", "1.5G", "-1G", "12X", "1PB")] == [None] * 6


def test_lanes_are_the_cores_while_each_gets_what_it_holds_and_the_rest_is_input_buffers():
    # 256 MiB, 92 held, 16 of slack: 148 MiB free; a Parquet lane holds 3 MiB and 81,920 rows of 217 bytes, three
    # times over: ~54 MiB
    spread = budget.plan(256 * MiB, 92 * MiB, 2, 81_920, 217, 3 * MiB)
    assert spread == budget.Budget(2, 8 * MiB)  # (74 - 54) / 2, rounded down to 4 MiB
    assert budget.plan(4096 * MiB, 92 * MiB, 2, 81_920, 217, 3 * MiB) == budget.Budget(2, budget.CEILING)
    assert budget.plan(4096 * MiB, 92 * MiB, 4, 81_920, 217, 3 * MiB).lanes == 4
    assert budget.plan(256 * MiB, 92 * MiB, 4, 81_920, 217, 3 * MiB).lanes == 2  # not four: each needs its share
    # rows ten times as wide: one lane, and no input buffer worth keeping (winners are read twice)
    assert budget.plan(256 * MiB, 92 * MiB, 2, 81_920, 2170, 3 * MiB) == budget.Budget(1, 0)
    assert budget.plan(128 * MiB, 120 * MiB, 8, 81_920, 217, 3 * MiB) == budget.Budget(1, 0)  # one, whatever it is


def test_a_memory_below_the_least_or_not_a_size_is_refused_before_anything_is_written(wide, tmp_path):
    run_dir = copy_run(wide, tmp_path / "ws")
    before = snapshot(run_dir)
    for given, message in (("100M", "tau-collect: --memory 104857600 is below the least a collection needs, 128 MiB"),
                           ("lots", "tau-collect: --memory 'lots' is not a size such as 512M or 2G"),
                           ("99999999T", "tau-collect: --memory 109951161678088372224 is more than 1 PiB; give the "
                                         "memory a collection may use, such as 512M or 2G")):
        proc = tau("tau-collect", str(run_dir), "--destination", str(run_dir.parent / "data"), "--memory", given)
        assert proc.returncode == 2, proc.stderr
        assert error_of(proc)["message"] == message
    proc = tau("tau-collect", str(run_dir), "--worker", "collection-0001", "--memory", "1G")
    assert proc.returncode == 2, proc.stderr
    assert error_of(proc)["message"] == "tau-collect: --worker takes no --memory (its collection's plan holds it)"
    assert snapshot(run_dir) == before
    assert sorted(os.listdir(run_dir.parent)) == ["run"]


def peak_at_staged(argv: list[str], trace: Path) -> tuple[dict, int]:
    """Run a tau-collect; its JSON output and its peak resident bytes, read from /proc when it has written its
    stage (it waits 2 s there, at failpoint collect.staged). Not from its rusage: a child started by this process
    starts with this process's peak as its own (the kernel carries the peak over fork and exec)."""
    environ = env_for_tests({"TAU_FAILPOINTS": "tau-collect:collect.staged=delay:2", "TAU_FAILPOINT_TRACE": str(trace)})
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=environ)
    while not (trace.exists() and "collect.staged" in trace.read_text()):
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.02)
    status = Path(f"/proc/{proc.pid}/status").read_text()
    peak = int(re.search(r"VmHWM:\s+(\d+) kB", status).group(1)) * 1024
    out, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err
    return json.loads(out), peak


def test_a_row_group_larger_than_the_budget_is_decoded_within_it_to_the_same_bytes_as_with_a_large_one(wide, tmp_path):
    run_dir = copy_run(wide, tmp_path / "ws")
    winner = next((run_dir / "shards" / "shard-00000" / "attempts").glob("*/dataset/part-00000.parquet"))
    assert winner.stat().st_size > 128 * MiB  # the row group alone is larger than the least budget
    peaks, outputs = {}, {}
    for memory in ("160M", "1G"):
        dest = run_dir.parent / f"data-{memory}"
        result, peaks[memory] = peak_at_staged([str(BIN / "tau-collect"), str(run_dir), "--destination", str(dest),
                                                "--memory", memory], tmp_path / f"trace-{memory}")
        assert [f["rows"] for f in result["files"]] == [250_000, 250_000, 200_000]
        outputs[memory] = {f["path"]: (dest / f["path"]).read_bytes() for f in result["files"]}
        plan = json.loads((run_dir / "collections" / result["collection_id"] / "plan.json").read_bytes())
        assert plan["memory"] == budget.parse(memory)
    assert peaks["160M"] <= 160 * MiB, f"peak {peaks['160M'] / MiB:.0f} MiB"
    assert outputs["160M"] == outputs["1G"]  # the budget spreads the work; it changes no byte
