import json
import os
import sys
from pathlib import Path

import pytest
from hypothesis import Phase, settings

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent / "integration"))
sys.path.insert(0, str(Path(__file__).resolve().parent / "adversarial"))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

# Under a bare `pytest -n N` (tests/run-all.sh exports the port of the one Azurite it started for all), each
# pytest-xdist worker has Azurite ports of its own, so that no two start a session Azurite on the same one.
if os.environ.get("PYTEST_XDIST_WORKER", "").startswith("gw") and "TAU_TEST_AZURITE_PORT" not in os.environ:
    os.environ["TAU_TEST_AZURITE_PORT"] = str(10100 + 10 * int(os.environ["PYTEST_XDIST_WORKER"][2:]))


# The Hypothesis profile TAU_TEST_PROPERTIES names (tests/rules_fixtures.py says which and why), loaded before any
# test module is imported, so that their @settings inherit it.
# Unset ("full"), Hypothesis keeps the profile it chose itself (its "ci" profile, derandomized, under CI=true).
settings.register_profile("quick", derandomize=True, database=None)
settings.register_profile("explicit", phases=[Phase.explicit], database=None)
_profile = os.environ.get("TAU_TEST_PROPERTIES", "full")
if _profile not in ("full", "quick", "explicit"):
    raise pytest.UsageError(f"TAU_TEST_PROPERTIES={_profile!r}: use full, quick or explicit")
if _profile != "full":
    settings.load_profile(_profile)


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    """A private workspace folder (0700), as a run's parent should be."""
    ws = tmp_path / "ws"
    ws.mkdir(mode=0o700)
    os.chmod(ws, 0o700)
    return ws


@pytest.fixture(scope="module")
def settled(request, tmp_path_factory) -> Path:
    """A settled local run of 4 shards whose shard-00001 failed its first attempt (not retried), one per test
    module. Copy it (helpers.copy_run) to change it."""
    from helpers import init_run, settle, tau

    ws = tmp_path_factory.mktemp(request.module.__name__.removeprefix("test_cli_")) / "ws"
    ws.mkdir(mode=0o700)
    run_dir = init_run(ws, fail_first=("shard-00001",))
    assert tau("tau-submit", str(run_dir)).returncode == 0
    settle(run_dir)
    return run_dir


@pytest.fixture(scope="session", autouse=True)
def statuses_validated():
    """Every run status a test gets without a process of its own is validated against status.schema.json, as
    helpers.tau validates what a command prints: each RunStatus the Python API builds (taulib.api: status,
    reconcile, drive, wait), and each document a command run in this process prints (tests/adversarial's invoke).
    A command's own exception handler turns the AssertionError into its internal-error exit, message and all."""
    from helpers import check_statuses
    from taulib.api.values import RunStatus
    from taulib.cli import common

    build, emit = RunStatus.of.__func__, common.emit

    def of(cls, doc):
        check_statuses(doc, "the Python API's status")
        return build(cls, doc)

    def emitted(obj):
        check_statuses(obj, "a command's output")
        emit(obj)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(RunStatus, "of", classmethod(of))
        patch.setattr(common, "emit", emitted)
        yield


@pytest.fixture(scope="session")
def nolink_fs(tmp_path_factory):
    """A real FUSE filesystem without hard links and without renameat2's flags (tests/fusefs.py), mounted once for
    the session; yields its mount point. Tests make their own folders in it."""
    import fusefs

    with fusefs.mounted(tmp_path_factory.mktemp("fuse")) as mountpoint:
        yield mountpoint


@pytest.fixture
def nolink_workspace(nolink_fs, request) -> Path:
    """A private workspace folder on the filesystem without hard links, for a test marked `root` (to mount it)."""
    import re

    from needs import declared

    declared(request, "nolink_workspace")
    ws = nolink_fs / re.sub(r"[^A-Za-z0-9_.-]", "_", request.node.name)[:100]
    ws.mkdir(mode=0o700)
    return ws


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items) -> None:
    """make check runs the tests on pytest-xdist workers (`-n 2 --dist loadgroup`, tests/run-all.sh): each module
    whole on one worker, so its module fixtures are made once, and every module with a test marked `slurm` (one
    that drives the one Slurm test cluster) on the same worker, one after another (some of them stop its daemons)."""
    slurm_modules = {item.nodeid.split("::", 1)[0] for item in items if item.get_closest_marker("slurm")}
    for item in items:
        module = item.nodeid.split("::", 1)[0]
        item.add_marker(pytest.mark.xdist_group("slurm" if module in slurm_modules else module))


# -- the adversarial suite's report (its counts are in tests/adversarial/harness.py) ----------------------------------

def pytest_sessionfinish(session) -> None:
    """On a pytest-xdist worker: its part of the report, for the controller (pytest_testnodedown)."""
    output = getattr(session.config, "workeroutput", None)
    if output is not None:
        from harness import EXERCISED, REPORT

        output["adversity"] = json.dumps({"report": dict(REPORT), "exercised": sorted(EXERCISED)})


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error) -> None:
    """On the pytest-xdist controller: a worker's part of the report added to the whole."""
    part = getattr(node, "workeroutput", {}).get("adversity")
    if part:
        from harness import EXERCISED, REPORT

        part = json.loads(part)
        REPORT.update(part["report"])
        EXERCISED.update(tuple(pair) for pair in part["exercised"])


def pytest_terminal_summary(terminalreporter) -> None:
    """The adversarial suite's report at the end of the run (and into TAU_ADVERSITY_REPORT when that names a file)."""
    from harness import EXERCISED, REPORT, SCALE

    if not REPORT and not EXERCISED:
        return
    from taulib import failpoints

    reached = {name for _, name in EXERCISED}
    line = (f"adversarial suite: {REPORT['cases']} generated cases tried, {REPORT['misbehaved']} misbehaved; "
            f"failpoints: {len(failpoints.NAMES)} total, {len(reached)} exercised in {len(EXERCISED)} "
            f"(command, failpoint) crashes; {REPORT['race_rounds']} race rounds; "
            f"{REPORT['crash_states']} crash states tried, {REPORT['crash_states_broken']} broke an invariant; "
            f"{REPORT['power_cuts']} power cuts, {REPORT['power_cuts_broken']} not converged; scale {SCALE}")
    terminalreporter.write_line(line)
    protocols = sorted(key.partition(":")[2] for key in REPORT if key.startswith("crash_states:"))
    if protocols:  # per protocol (tests/adversarial/crashcheck.py counts them)
        terminalreporter.write_line("crash states per protocol: " + "; ".join(
            f"{p}: {REPORT['crash_states:' + p]} tried, {REPORT['crash_states_broken:' + p]} broke" for p in protocols))
    target = os.environ.get("TAU_ADVERSITY_REPORT")
    if target:
        with open(target, "w") as fh:
            json.dump({"cases": REPORT["cases"], "misbehaved": REPORT["misbehaved"],
                       "failpoints_total": len(failpoints.NAMES), "failpoints_exercised": sorted(reached),
                       "crashes": sorted(f"{c} {n}" for c, n in EXERCISED), "race_rounds": REPORT["race_rounds"],
                       "crash_states": {p: REPORT["crash_states:" + p] for p in protocols},
                       "crash_states_broken": REPORT["crash_states_broken"], "power_cuts": REPORT["power_cuts"],
                       "power_cuts_broken": REPORT["power_cuts_broken"],
                       "scale": SCALE}, fh, indent=1)
