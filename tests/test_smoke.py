import json

from helpers import complete_run, tau


def test_a_complete_run_collects_every_planned_record(workspace):
    run_dir = complete_run(workspace, fail_first=("shard-00001",))
    proc = tau("tau-collect", str(run_dir), "--destination", str(workspace / "out"))
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert (result["state"], result["records"], result["created"]) == ("succeeded", 80, True)
    assert sum(f["rows"] for f in result["files"]) == 80
