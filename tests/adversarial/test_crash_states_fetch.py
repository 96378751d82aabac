"""Crash states of tau-bundle-fetch (tests/crashstates.py; the run's protocols are in test_crash_states.py): a
generation sealed and uploaded to a real Azurite, fetched under strace into an empty workspace, and every state a
power cut may leave of the fetch checked: the destination is absent or whole (its marker and manifest, every file
the manifest lists with its sha256, nothing else), a fetch again exits 0 (73 when the destination was already
whole: tau never overwrites) and leaves it whole, and tau-bundle-verify says so."""

from __future__ import annotations

import os

import crashcheck as cc
import crashstates as cs
import pytest
from harness import invoke

import azurite as az
from helpers import BIN, env_for_tests, tau

pytestmark = [pytest.mark.slow, pytest.mark.azurite,
              pytest.mark.skipif(not os.path.exists(cs.STRACE), reason="strace is missing (make system-deps)")]

azurite_running = az.azurite_running
box = az.box


class Fetch:
    name = "fetch"

    def __init__(self, ws, url: str) -> None:
        self.ws, self.url = ws, url
        self.dest = ws / "got"
        self.args = [url, "--generation", "g1", "--destination", str(self.dest)]
        self.pre = cs.capture(ws)

    def fetch_again(self, whole: bool) -> list[str]:
        found = cc.outcome_problem("tau-bundle-fetch again", invoke("tau-bundle-fetch", self.args),
                                   (0, 73) if whole else (0,))
        if found:
            return [found]
        verified = invoke("tau-bundle-verify", [str(self.dest), "--generation", "g1"])
        found = cc.outcome_problem("tau-bundle-verify of the fetched generation", verified, (0,))
        return ([found] if found else []) + cc.problems_of_bundle(self.dest, "g1")

    def check(self, state: cs.CrashState) -> list[str]:
        cs.materialise(state.state, self.ws)
        found = cc.problems_of_bundle(self.dest, "g1")
        return found or self.fetch_again(self.dest.exists())

    def converge(self, state: cs.CrashState) -> list[str]:
        cs.materialise(state.state, self.ws)
        whole = self.dest.exists()
        proc = tau("tau-bundle-fetch", *self.args, env=az.env())
        if proc.returncode not in ((0, 73) if whole else (0,)) or "Traceback" in proc.stderr:
            return [f"tau-bundle-fetch exited {proc.returncode}: {proc.stderr[-300:]}"]
        return cc.problems_of_bundle(self.dest, "g1") or ([] if self.dest.exists() else ["no destination"])


def test_every_crash_state_of_a_fetch_leaves_its_destination_absent_or_whole(box, tmp_path, monkeypatch):
    src = tmp_path / "src"
    for rel, data in (("model.bin", b"weights\n" * 100), ("ckpt/step-1.txt", b"step 1\n"),
                      ("ckpt/deep/notes.txt", b"deep\n")):
        (src / rel).parent.mkdir(parents=True, exist_ok=True)
        (src / rel).write_bytes(data)
    url = az.url(box, "crash/out")
    sealed = tau("tau-bundle-seal", str(src), "--generation", "g1", "--upload", url, env=az.env())
    assert sealed.returncode == 0, sealed.stderr
    ws = tmp_path / "ws"
    ws.mkdir(mode=0o700)
    for name, value in az.env().items():  # the in-process commands reach the same Azurite
        monkeypatch.setenv(name, value)
    step = Fetch(ws, url)
    rec = cs.record([str(BIN / "tau-bundle-fetch"), *step.args], ws, env=env_for_tests(az.env()), cwd=tmp_path)
    assert rec.returncode == 0, rec.stderr
    assert cs.digest(cs.prefix(rec, len(rec.ops))) == cs.digest(cs.capture(ws))
    results: dict[str, list[int]] = {}
    broken = cc.explore(step, rec, lambda op, finals: "fetch", results)
    print(f"crash states: fetch: {results['fetch'][0]} tried, {results['fetch'][1]} broke an invariant")
    assert results["fetch"][0] >= 10
    assert not broken, f"{len(broken)} crash states broke an invariant:\n" + "\n".join(broken[:15])
