"""The run's status now (tau-status): the executors asked, the evidence rules applied, nothing written.

Reads: what tau-observe reads (the executors about the live attempts) and what tau-reconcile reads (the records).
Writes: nothing at all: the run directory is byte-for-byte as it was (a test checks). Promises: the same pure rules
as tau-reconcile (`rules.evidence`, `rules.attempt`, `rules.rollup`): the status is the one tau-reconcile would print
for the same observation, without the `changes` it would make.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from taulib import executors
from taulib.lifecycle import observe, reconcile
from taulib.rundir import locks, state, usage
from taulib.rundir.status import run_status

if TYPE_CHECKING:
    from taulib.jsonio import Record
    from taulib.rules.evidence import Evidence
    from taulib.rundir.run import Run


def status(run: Run) -> Record:
    with locks.hold(run.dir, "run", shared=True):
        doc = reconcile.validate_document(observe.observe(run))
        now = time.time()
        evidence: dict[tuple[str, str], Evidence] = {}
        submitted = state.Submitted(run)
        for key, (view, seen) in reconcile.seen_of(doc, now).items():
            *_, new = reconcile.next_for(run, view, seen, now, submitted)
            if new is not None:
                evidence[key] = new
        return run_status(run, parallel=executors.of(run).limits(run.plan).parallel, sources=doc["sources"],
                          now=now, evidence=evidence, measured=usage.unrecorded(run, doc["usage"]["submissions"]),
                          usage_reason=doc["usage"]["reason"])
