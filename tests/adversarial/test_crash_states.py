"""Crash states, not only crashes: every commit protocol's file-system operations recorded, and what a power cut may
leave of them checked (tests/crashstates.py builds the states; see its docstring for the model).

One run's life is recorded step by step in one workspace (the same absolute path throughout: records hold it):
tau-init, tau-submit (with the local supervisor, the attempts and their clients it starts, each attempt publishing
its winner and the sealed-shard index), observe | tau-reconcile, tau-retry, tau-winner (a candidate whose winner
was left to it), tau-reconcile rebuilding the index, tau-cancel, tau-collect (also
with TAU_NO_RENAMEAT2=1: the publication's fallback), and tau-bundle-seal of an output tree
with its payload. Each step's crash states are materialised in turn at the workspace's path, and a fresh command
must converge on each: the read exits 0 (66 before run.json exists) without a traceback, every visible record is
valid, every winner is whole (its chain holds and its files hash as its manifest says), a collection destination is
absent or whole, a sealed bundle verifies; then the step's recovery (observe | reconcile and tau-winner, the same
command again) exits with a documented code and the invariants still hold; on a seeded sample of states per step,
tau-drive (real processes) finishes the run. A state is counted under the protocol of the last operation issued
before the cut (by its process, or for the winner and the index by the record it touched).
"""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

import crashcheck as cc
import crashstates as cs
import pytest
from harness import invoke

from helpers import BIN, env_for_tests, plan, status, tau, wait_for_lock

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not os.path.exists(cs.STRACE), reason="strace is missing (make system-deps)")]

PLAN = plan(records=8, shards=2, fail_first=("shard-00001",), retry={"max_attempts": 4})
PLAN["command"][PLAN["command"].index("--rows-per-file") + 1] = "2"
RESULTS: dict[str, list[int]] = {}  # protocol -> [tried, broke]
ATTEMPT_SIDE = ("taulib.cli.attempt", "tau-attempt", "client.py")


def protocol_of(step: str):
    """The protocol a state of `step` counts under: the winner and the index by the record the last operation
    served, the attempts (and their clients) apart from the submission that started them, else the step's."""
    def protocol(op: cs.Op | None, finals: dict[int, str]) -> str:
        if op is None:
            return step.partition("-")[0]
        path = finals.get(op.ino, op.path) if op.kind in ("write", "trunc", "sync", "link") else op.path
        if path == "run/index" or path.startswith("run/index/"):
            return "index"
        if path.endswith("/winner.json"):
            return "winner"
        if step in ("submit", "retry") and op.cmd in ATTEMPT_SIDE:
            return "attempt"
        return step.partition("-")[0]
    return protocol


# -- the steps ------------------------------------------------------------------------------------------------------

class Step:
    """One recorded command of the life, its crash states and how a fresh process must converge on each."""

    def __init__(self, name: str, ws: Path, pre: dict, argv: list[str], stdin: bytes = b"",
                 env: dict | None = None) -> None:
        self.name, self.ws, self.pre, self.argv, self.stdin, self.env = name, ws, pre, argv, stdin, env
        self.collects = name.startswith("collect")

    def record(self) -> cs.Recording:
        cs.materialise(self.pre, self.ws)
        rec = cs.record(self.argv, self.ws, stdin=self.stdin, env=env_for_tests(self.env), cwd=self.ws.parent)
        assert rec.returncode in (0, 1), (self.name, rec.returncode, rec.stderr[-2000:])
        assert cs.digest(cs.prefix(rec, len(rec.ops))) == cs.digest(cs.capture(self.ws)), \
            f"{self.name}: the op log replayed is not what the command left (a system call the recorder misses)"
        return rec

    def recover(self) -> list[str]:
        """The step's recovery in this process: what must exit 0 (or a documented code) on a crash state."""
        run = str(self.ws / "run")
        out = []
        if self.name == "init":
            out.append(cc.outcome_problem("tau-init again", invoke("tau-init", [run], stdin=self.stdin), (0,)))
        elif self.name in ("cancel", "seal") or self.collects:
            command = os.path.basename(self.argv[0])
            args = self.argv[1:self.argv.index("--")] if "--" in self.argv else self.argv[1:]
            out.append(cc.outcome_problem(f"{command} again", invoke(command, args), (0,)))
        if self.name != "seal":
            observed = invoke("tau-observe", [run])
            out.append(cc.outcome_problem("tau-observe", observed, (0,)))
            if observed.code == 0:
                reconciled = invoke("tau-reconcile", [run], stdin=observed.out)
                out.append(cc.outcome_problem("tau-reconcile", reconciled, (0,)))
                out.append(cc.outcome_problem("tau-winner", invoke("tau-winner", [run]), (0, 1)))
        return [p for p in out if p]

    def read(self) -> list[str]:
        if self.name == "seal":
            out = self.ws / "out"
            if not (out / ".tau" / "bundles" / "g1.complete").exists():
                return []
            verified = invoke("tau-bundle-verify", [str(out), "--generation", "g1"])
            return [p for p in [cc.outcome_problem("tau-bundle-verify of a sealed generation", verified, (0,))] if p]
        run = self.ws / "run"
        expected = (0,) if (run / "run.json").exists() else (66,)
        return [p for p in [cc.outcome_problem("tau-status", invoke("tau-status", [str(run)]), expected)] if p]

    def invariants(self) -> list[str]:
        return cc.problems_of_run(self.ws / "run") + cc.problems_of_destination(self.ws / "data")

    def check(self, state: cs.CrashState) -> list[str]:
        cs.materialise(state.state, self.ws)
        found = self.read() + self.invariants()
        if found:
            return found
        found = self.recover()
        return found + self.read() + self.invariants()

    def converge(self, state: cs.CrashState) -> list[str]:
        """tau-drive, as real processes, finishes the run from this state (and its collection, in the collect
        step); a shard whose cancellation the state kept ends cancelled."""
        if self.name == "seal":
            return []
        cs.materialise(state.state, self.ws)
        if self.name == "init":
            proc = tau("tau-init", str(self.ws / "run"), input=self.stdin)
            if proc.returncode != 0:
                return [f"tau-init exited {proc.returncode}: {proc.stderr[-300:]}"]
        cancelled = (self.ws / "run" / "shards" / "shard-00001" / "cancel.json").exists()
        extra = ["--collect", str(self.ws / "data")] if self.collects else []
        proc = tau("tau-drive", str(self.ws / "run"), "--interval", "0.2", *extra, timeout=120)
        supervisors_exited(self.ws / "run")  # a retry's supervisor records its task's end after the winner
        if proc.returncode not in (0, 1) or "Traceback" in proc.stderr:
            return [f"tau-drive exited {proc.returncode}: {proc.stderr[-500:]}"]
        shards = {s["id"]: s["state"] for s in json.loads(proc.stdout)["status"]["shards"]}
        want = {"shard-00000": "succeeded", "shard-00001": "cancelled" if cancelled else "succeeded"}
        found = [f"tau-drive left {shards}"] if shards != want else []
        if self.collects and not (self.ws / "data").exists():
            found.append("tau-drive --collect left no collection")
        return found + self.invariants()


def supervisors_exited(run: Path, timeout: float = 60) -> None:
    """Wait until every local supervisor that started in the run has exited (it holds its lock for its lifetime):
    tau-drive returns once the run is finished, while the supervisor of its retry may still record how its task
    ended, and the next crash state is written over the same folder."""
    from taulib.executors.local import records

    deadline = time.monotonic() + timeout
    for started in sorted(run.glob("submissions/submission-*/local/supervisor.json")):
        lock = run / "locks" / f"{records.supervisor_lock(started.parent.parent.name)}.lock"
        if not lock.exists():
            continue  # the crash state has no lock file: no supervisor of this folder can hold it
        with open(lock, "a") as fh:
            wait_for_lock(fh.fileno(), deadline, f"the supervisor of {started.parent.parent.name}")


# -- the life -------------------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def life(tmp_path_factory):
    """The workspace (one path for every step) and the snapshots between the steps, recorded as they are made."""
    ws = tmp_path_factory.mktemp("crash-states") / "ws"
    ws.mkdir(mode=0o700)
    return {"ws": ws, "states": {"empty": cs.capture(ws)}, "recordings": {}}


def run_step(life, name: str, pre: str, argv: list[str], stdin: bytes = b"", env: dict | None = None) -> list[str]:
    ws = life["ws"]
    step = Step(name, ws, life["states"][pre], argv, stdin, env)
    started = time.monotonic()
    rec = life["recordings"][name] = step.record()
    life["states"][name] = cs.capture(ws)
    broken = cc.explore(step, rec, protocol_of(name), RESULTS)
    tried = sum(v[0] for v in RESULTS.values())
    print(f"{name}: {len(rec.ops)} ops, {tried} crash states tried so far, {time.monotonic() - started:.1f} s")
    return broken


def tau_bin(name: str) -> str:
    return str(BIN / name)


STEPS = ["init", "submit", "reconcile", "retry", "winner", "index", "cancel", "collect", "collect-fallback", "seal"]


@pytest.mark.parametrize("name", STEPS)
def test_every_crash_state_of_each_protocol_converges(life, name):
    ws = life["ws"]
    run = str(ws / "run")
    if name == "init":
        broken = run_step(life, "init", "empty", [tau_bin("tau-init"), run], json.dumps(PLAN).encode())
    elif name == "submit":
        broken = run_step(life, "submit", "init", [tau_bin("tau-submit"), run])
    elif name == "reconcile":  # a power cut while both clients ran (the first byte of output): observed, reconciled
        rec = life["recordings"]["submit"]
        cut = next(i for i, op in enumerate(rec.ops) if op.cmd == "client.py")
        life["states"]["midrun"] = cs.prefix(rec, cut)
        cs.materialise(life["states"]["midrun"], ws)
        observed = tau("tau-observe", run)
        assert observed.returncode == 0, observed.stderr
        broken = run_step(life, "reconcile", "midrun", [tau_bin("tau-reconcile"), run], observed.stdout.encode())
    elif name == "retry":  # the failed shard retried, once the run settled
        cs.materialise(life["states"]["submit"], ws)
        settled_doc = status(Path(run))
        assert settled_doc["retryable"] == ["shard-00001"], settled_doc
        life["states"]["settled"] = cs.capture(ws)
        broken = run_step(life, "retry", "settled", [tau_bin("tau-retry"), run])
    elif name == "winner":  # the retried shard's winner left to tau-winner (the index is a cache: dropped too)
        cs.materialise(life["states"]["retry"], ws)
        os.unlink(ws / "run" / "shards" / "shard-00001" / "winner.json")
        shutil.rmtree(ws / "run" / "index")
        life["states"]["unwon"] = cs.capture(ws)
        broken = run_step(life, "winner", "unwon", [tau_bin("tau-winner"), run])
    elif name == "index":  # the index dropped: tau-reconcile adds every sealed shard back
        cs.materialise(life["states"]["winner"], ws)
        shutil.rmtree(ws / "run" / "index")
        observed = tau("tau-observe", run)
        assert observed.returncode == 0, observed.stderr
        life["states"]["unindexed"] = cs.capture(ws)
        broken = run_step(life, "index", "unindexed", [tau_bin("tau-reconcile"), run], observed.stdout.encode())
    elif name == "cancel":  # the failed shard cancelled before its retry
        broken = run_step(life, "cancel", "settled", [tau_bin("tau-cancel"), run, "--shard", "shard-00001"])
    elif name == "collect":
        broken = run_step(life, "collect", "index", [tau_bin("tau-collect"), run, "--destination", str(ws / "data")])
    elif name == "collect-fallback":  # published where renameat2 is missing: reserve, claim, rename, release
        broken = run_step(life, "collect-fallback", "index", [tau_bin("tau-collect"), run, "--destination",
                                                              str(ws / "data")], env={"TAU_NO_RENAMEAT2": "1"})
    else:
        cs.materialise(life["states"]["empty"], ws)
        (ws / "out").mkdir(mode=0o700)
        life["states"]["payload"] = cs.capture(ws)
        payload = f"mkdir -p {ws}/out/ckpt && printf 'weights\\n' > {ws}/out/model.bin && " \
                  f"printf 'step 1\\n' > {ws}/out/ckpt/step-1.txt"
        broken = run_step(life, "seal", "payload", [tau_bin("tau-bundle-seal"), str(ws / "out"), "--generation",
                                                    "g1", "--", "/bin/sh", "-c", payload])
    assert not broken, f"{len(broken)} crash states broke an invariant:\n" + "\n".join(broken[:15])


def test_the_report_names_every_protocol_with_its_states(life):
    """Runs after the steps: per protocol, the crash states tried and how many broke an invariant (none)."""
    if not RESULTS:
        pytest.skip("the steps did not run in this session")
    expected = {"init", "submit", "attempt", "winner", "index", "reconcile", "retry", "cancel", "collect", "seal"}
    missing = expected - set(RESULTS)
    for proto, (tried, broke) in sorted(RESULTS.items()):
        print(f"crash states: {proto}: {tried} tried, {broke} broke an invariant")
    assert not missing, f"no crash state was tried for {sorted(missing)}"
    assert all(broke == 0 for _, broke in RESULTS.values())
