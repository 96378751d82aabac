"""A collection published as a verified bundle (tau-collect --upload URL; tau-collect(1) "Upload").

Reads: the collection's plan (its `upload`: the Blob prefix, checked as tau-bundle-seal --upload checks it, and the
generation), the stage's `_tau_collection.json` and listing, the published dataset's acknowledgement, and
`RUN/bundles/G.json`. Writes: into the stage, before it is published, the generation's manifest
`.tau/bundles/G.json` (every dataset file's path, size and sha256), then its marker `.tau/bundles/G.complete`, then
`.tau/current`, each fsynced with their folders; after publication, the dataset's blobs (`bundle.upload`, all or
nothing: the marker last) and then the record `RUN/bundles/G.json` with the collection's id (`bundle.where`,
under bundles.lock).
Promises:
- a collection planned without --upload is untouched: its plan has no `upload`, its stage gets no `.tau/`, and
  every byte of its dataset is what it was before tau-collect took --upload;
- the dataset appears at its destination already sealed (tau-bundle-verify DEST passes), and the manifest reuses
  the digests `collect.outputs` computed while writing the partitions (the stage's listing must match them, size
  for size; only `_tau_collection.json` is hashed, from its bytes);
- the generation is `<run id>-<8 hex of run.json's sha256>-<collection id>` (the run id cut to 100 characters, as
  in the collection job's name): one per collection, different for two runs of one name;
- only a published (succeeded) collection is uploaded, outside collect.lock (its dataset is immutable), and it is
  recorded only once its marker is up; a failed or stopped upload leaves the collection succeeded and is finished
  by the next tau-collect of the same destination, shape and --upload (the blobs already there are skipped);
- a collection is uploaded to one prefix: asking for it with another --upload, or without one, is a conflict (73)
  naming what is recorded.
Imports the Azure SDK (through `bundle.upload`) only when uploading.
"""

from __future__ import annotations

import os
import socket
from typing import TYPE_CHECKING

from taulib import __version__, jsonio
from taulib.collect.destination import RESULT, modes
from taulib.errors import Conflict, Internal, Refused, TauError

if TYPE_CHECKING:
    from taulib.fs.tree import Tree
    from taulib.jsonio import Record
    from taulib.rundir.run import Run


def asked(url: str | None) -> str | None:
    """The --upload URL, checked before anything is read or written (Refused, 77, as tau-bundle-seal --upload:
    an untrusted host, userinfo, a query such as a SAS token, ...) and normalised; None without --upload."""
    if url is None:
        return None
    from taulib.bundle import endpoint

    try:
        return endpoint.parse(url).url()
    except Refused as exc:  # its message quotes the URL: never a SAS token or a password in an error
        shown = _redacted(url)
        exc.message = exc.message.replace(repr(url), repr(shown))
        exc.args = (exc.message,)
        raise


def _redacted(url: str) -> str:
    """The URL without what may be a credential: its user information, its query and its fragment."""
    head, sep, rest = url.partition("://")
    if not sep:
        head, rest = "", url
    host, slash, path = rest.partition("/")
    path = path.split("?", 1)[0].split("#", 1)[0]
    hidden = "?(query not shown)" if "?" in rest or "#" in rest else ""
    user = "(user information not shown)@" if "@" in host else ""
    return f"{head}{sep}{user}{host.rpartition('@')[2]}{slash}{path}{hidden}"


def generation(run: Run, collection_id: str) -> str:
    return f"{run.run_id[:100]}-{jsonio.digest(run.record)[:8]}-{collection_id}"


def planned(run: Run, collection_id: str, url: str | None) -> Record:
    """The plan's `upload` ({url, generation}), or nothing at all without --upload."""
    if url is None:
        return {}
    from taulib.bundle import manifest as mf

    return {"upload": {"url": url, "generation": mf.check_generation(generation(run, collection_id))}}


def same_upload(plan: Record, url: str | None, verb: str) -> None:
    """Conflict (73) unless the collection `plan` is uploaded where `url` asks (None: not at all)."""
    recorded = (plan.get("upload") or {}).get("url")
    if recorded == url:
        return
    if recorded is None:
        then = ("its dataset was published unsealed and is never changed: collect with --upload to another "
                f"destination, or seal and upload it yourself (tau-bundle-seal {plan['destination']} --generation G "
                "--upload URL)")
    else:
        then = (f"a collection is uploaded to one prefix: give --upload {recorded} for that one (which also finishes "
                "an upload that did not), or collect to another destination to upload elsewhere")
    raise Conflict(f"destination {plan['destination']!r} {verb} {plan['collection_id']} {_said(recorded)}, not "
                   f"{_said(url)} as asked; {then}", destination=plan["destination"],
                   collection_id=plan["collection_id"], upload=recorded)


def _said(url: str | None) -> str:
    return "without --upload" if url is None else f"with --upload {url!r}"


def seal(run: Run, plan: Record, result: Record, parent: Tree, staged: str) -> None:
    """Seal the stage `staged` (in `parent`) of a collection planned with --upload as its generation, before it is
    published: the manifest of every dataset file, from `result` (its `_tau_collection.json`), then the marker,
    then the current pointer, all made durable. Nothing without --upload."""
    upload = plan.get("upload")
    if upload is None:
        return
    from taulib.bundle import manifest as mf

    name = upload["generation"]
    with parent.subtree(staged, modes=modes(plan)) as stage:  # .tau/ and its files with the dataset's modes
        files = _described(stage, result, mf.walk(stage))
        record = mf.build(name, files, {"run_id": run.run_id, "shard_id": None, "attempt_id": None},
                          {"host": socket.gethostname()[:255], "uid": os.geteuid(), "tau_version": __version__,
                           "command": None}, None)
        data = jsonio.canonical(record)
        stage.write_new(mf.manifest_name(name), data)
        stage.write_new(mf.marker_name(name), mf.marker_text(name, jsonio.sha256_hex(data)))
        stage.write_new(mf.CURRENT, mf.current_text(name))
        stage.sync_folders([mf.manifest_name(name), mf.marker_name(name), mf.CURRENT])


def _described(stage: Tree, result: Record, listing: list[tuple[str, int]]) -> list[Record]:
    """The manifest's files: the stage's listing, each with the sha256 its writer computed (the partitions') or of
    the bytes there (`_tau_collection.json`); Internal (70) when the stage holds other files or other sizes."""
    known = {f["path"]: f for f in result["files"]}
    data = stage.read_bytes(RESULT, limit=64 << 20)
    if data is not None:
        known[RESULT] = {"path": RESULT, "size": len(data), "sha256": jsonio.sha256_hex(data)}
    files = []
    for rel, size in listing:
        entry = known.pop(rel, None)
        if entry is None or entry["size"] != size:
            raise Internal(f"the stage of collection {result['collection_id']} holds {rel!r} ({size} bytes), which "
                           "its _tau_collection.json does not describe so; nothing is published")
        files.append({"path": rel, "size": size, "sha256": entry["sha256"]})
    if known:
        raise Internal(f"the stage of collection {result['collection_id']} lacks {sorted(known)[0]!r}; nothing is "
                       "published")
    return files


def deliver(run: Run, summary: Record) -> Record:
    """The summary of a collection with its upload done: for a succeeded collection planned with --upload whose
    generation the run does not record yet, upload the published dataset and record it; its `bundle` filled from
    the record. Any other summary is returned as it is. The caller holds no lock of the run."""
    if summary.get("bundle") is None or summary["state"] != "succeeded":
        return summary
    from taulib.bundle import where
    from taulib.collect.report import bundle
    from taulib.rundir import locks
    from taulib.rundir.journal import COLLECTIONS, Journal

    with locks.hold(run.dir, "run", shared=True):
        plan = run.dir.require(Journal(run, COLLECTIONS).plan_rel(summary["collection_id"]), COLLECTIONS.plan_kind)
        ref = where.recorded(run, plan["upload"]["generation"])
        if ref is None:
            ref = _upload(run, plan)
    return {**summary, "bundle": bundle(plan, ref)}


def _upload(run: Run, plan: Record) -> Record:
    """Upload the published dataset (sealed as the plan's generation) to the plan's prefix and record it; a failure
    keeps its code, its message saying that the collection itself succeeded."""
    from taulib.bundle import manifest as mf
    from taulib.bundle import where
    from taulib.rundir import locks

    url, name, root = plan["upload"]["url"], plan["upload"]["generation"], plan["destination"]
    try:
        with mf.open_tree(root) as tree:
            manifest_bytes = tree.read_bytes(mf.manifest_name(name))
            record = mf.load_ack(name, manifest_bytes, tree.read_bytes(mf.marker_name(name)), root)
        assert manifest_bytes is not None, "load_ack refuses a generation without a manifest"
        from taulib.bundle import upload

        upload.upload_bundle(root, record, manifest_bytes, url)
    except TauError as exc:
        exc.message = (f"collection {plan['collection_id']} is published at {root!r}, but its upload to {url} did not "
                       f"finish: {exc.message}; the collection stays as it is, and tau-collect with the same "
                       "destination and --upload finishes the upload")
        exc.args = (exc.message,)
        exc.details = {**exc.details, "collection_id": plan["collection_id"], "generation": name}
        raise
    with locks.hold(run.dir, "bundles"):
        return where.record_collection(run, name, url, jsonio.sha256_hex(manifest_bytes), plan["collection_id"])
