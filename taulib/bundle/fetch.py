"""Fetching a bundle generation from Blob storage (tau-bundle-fetch): verified, all or nothing.

Order, failing closed before any byte lands at the destination:
  1. the SOURCE URL passes `taulib.bundle.endpoint` (no request is made for an untrusted one);
  2. the generation comes from --generation, or from the mutable pointer `.tau/current` only with --current;
  3. the destination must be absent or an empty folder; its parent must exist and not be writable by others;
  4. marker, then manifest, checked as tau-bundle-verify does; the listing must equal the manifest (missing,
     extra, resized named); every manifest path is relative and stays inside the destination;
  5. download concurrently into a private stage folder beside the destination (`.NAME.tau-fetch-RANDOM`, 0700),
     each blob pinned to its listed etag, sha256 computed while the bytes arrive, every size and digest compared
     with the manifest; a progress bar on stderr when it is a terminal;
  6. publish: the stage (with the acknowledgement under `.tau/bundles/`) is renamed to the destination with
     renameat2(RENAME_NOREPLACE), or onto the empty destination folder; on any failure the stage is removed and
     nothing exists at the destination that was not there before.
"""

from __future__ import annotations

import os
import stat
import sys
import threading
from concurrent.futures import ThreadPoolExecutor

from taulib import jsonio, publish
from taulib.bundle import blob, endpoint
from taulib.bundle import manifest as mf
from taulib.bundle.verify import _report, check_ack
from taulib.errors import CheckFailed, Conflict, NotFound, Refused, UsageError

WORKERS = 8


class _Progress:
    def __init__(self, total: int) -> None:
        self.total, self.done, self.lock = total, 0, threading.Lock()
        self.enabled = sys.stderr.isatty()

    def __call__(self, n: int) -> None:
        if not self.enabled:
            return
        with self.lock:
            self.done += n
            width = 30
            filled = width * self.done // max(self.total, 1)
            sys.stderr.write(f"\r[{'#' * filled}{'.' * (width - filled)}] {self.done >> 20}/{self.total >> 20} MiB")
            sys.stderr.flush()

    def finish(self) -> None:
        if self.enabled:
            sys.stderr.write("\n")


def _destination(destination: str) -> tuple[int, str, bool]:
    dest = os.path.abspath(destination)
    parent, name = os.path.split(dest)
    if not name:
        raise UsageError(f"--destination {destination!r} has no final name")
    try:
        parent_fd = os.open(parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except FileNotFoundError:
        raise NotFound(f"the parent folder of {dest!r} does not exist") from None
    st = os.fstat(parent_fd)
    if st.st_mode & 0o002 and not st.st_mode & stat.S_ISVTX:
        os.close(parent_fd)
        raise Refused(f"the parent folder of {dest!r} is writable by anyone; refusing to publish there")
    try:
        dst = os.stat(name, dir_fd=parent_fd, follow_symlinks=False)
    except FileNotFoundError:
        return parent_fd, name, False
    if not stat.S_ISDIR(dst.st_mode):
        os.close(parent_fd)
        raise Conflict(f"destination {dest!r} exists and is not a folder; tau never overwrites")
    sub = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=parent_fd)
    try:
        empty = not os.listdir(sub)
    finally:
        os.close(sub)
    if not empty:
        os.close(parent_fd)
        raise Conflict(f"destination {dest!r} exists and is not empty; tau never overwrites")
    return parent_fd, name, True


def _make_dirs(stage_fd: int, rel: str) -> int:
    """Folders of rel below the stage (0700), returning the descriptor of the file's folder."""
    fd = stage_fd
    for segment in rel.split("/")[:-1]:
        try:
            os.mkdir(segment, 0o700, dir_fd=fd)
        except FileExistsError:
            pass
        new = os.open(segment, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
        if fd != stage_fd:
            os.close(fd)
        fd = new
    return fd


def fetch(source: str, destination: str, generation: str | None, current: bool = False,
          env: dict | None = None) -> dict:
    location = endpoint.parse(source, env)
    if generation is None and not current:
        raise UsageError("name the generation (--generation G, from trusted metadata), or follow the mutable "
                         "pointer explicitly with --current")
    parent_fd, name, existed = _destination(destination)
    try:
        client = blob.container(location, env)
        if generation is None:
            pointer = blob.read_small(client, f"{location.prefix}/{mf.TAU_DIR}/current", limit=256)
            if pointer is None:
                raise CheckFailed(f"{location.url()} has no current pointer (.tau/current)")
            generation = pointer.decode("ascii", "replace").strip()
        mf.check_generation(generation)
        report = _report(location.url(), generation)
        manifest_bytes = blob.read_small(client, f"{location.prefix}/{mf.manifest_name(generation)}")
        marker_bytes = blob.read_small(client, f"{location.prefix}/{mf.marker_name(generation)}")
        record = check_ack(report, generation, manifest_bytes, marker_bytes)
        if record is None:
            raise CheckFailed(f"bundle {location.url()} generation {generation!r} is not acknowledged: "
                              f"{'; '.join(report['problems'])}", generation=generation)
        listing = {path: value for path, value in blob.list_prefix(client, location.prefix).items()
                   if not path.startswith(mf.TAU_DIR + "/")}
        differences = mf.compare(record, {p: v[0] for p, v in listing.items()})
        if any(differences.values()):
            raise CheckFailed(f"the blobs under {location.url()} do not match generation {generation!r}: "
                              + _describe(differences), **differences)
        stage = f".{name}.tau-fetch-{os.urandom(6).hex()}"
        os.mkdir(stage, 0o700, dir_fd=parent_fd)
        try:
            _download_all(client, location, record, listing, parent_fd, stage)
            stage_fd = os.open(stage, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=parent_fd)
            try:
                for rel, data in ((mf.manifest_name(generation), manifest_bytes),
                                  (mf.marker_name(generation), marker_bytes)):
                    dfd = _make_dirs(stage_fd, rel)
                    fd = os.open(rel.rsplit("/", 1)[1], os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600,
                                 dir_fd=dfd)
                    os.write(fd, data)
                    os.fsync(fd)
                    os.close(fd)
                    os.close(dfd)
                os.fsync(stage_fd)
            finally:
                os.close(stage_fd)
            if existed:
                os.rmdir(name, dir_fd=parent_fd)  # it was empty: the rename below takes its place, never overwrites
            publish.rename_noreplace(parent_fd, stage, name)
            os.fsync(parent_fd)
        except BaseException:
            from taulib.store import _rmtree_at

            _rmtree_at(parent_fd, stage)
            raise
    finally:
        os.close(parent_fd)
    return {"kind": "tau.bundle-fetch", "schema_version": 1, "source": location.url(), "generation": generation,
            "destination": os.path.abspath(destination), "manifest_sha256": jsonio.sha256_hex(manifest_bytes),
            "files": record["totals"]["files"], "bytes": record["totals"]["bytes"]}


def _describe(differences: dict) -> str:
    parts = []
    for key in ("missing", "extra"):
        if differences[key]:
            parts.append(f"{key} {differences[key][:5]}")
    if differences["resized"]:
        parts.append("resized " + ", ".join(f"{r['path']} ({r['actual']} bytes, manifest {r['expected']})"
                                            for r in differences["resized"][:5]))
    return "; ".join(parts)


def _download_all(client, location, record: dict, listing: dict, parent_fd: int, stage: str) -> None:
    stage_fd = os.open(stage, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=parent_fd)
    progress = _Progress(record["totals"]["bytes"])
    try:
        def one(entry: dict) -> None:
            dfd = _make_dirs(stage_fd, entry["path"])
            try:
                fd = os.open(entry["path"].rsplit("/", 1)[-1], os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
                             | os.O_CLOEXEC, 0o600, dir_fd=dfd)
            finally:
                if dfd != stage_fd:
                    os.close(dfd)
            try:
                sha = blob.download(client, f"{location.prefix}/{entry['path']}", fd, entry["size"],
                                    listing[entry["path"]][1], progress)
                if os.fstat(fd).st_size != entry["size"]:
                    raise CheckFailed(f"{entry['path']} arrived with {os.fstat(fd).st_size} bytes, the manifest "
                                      f"says {entry['size']}")
                if sha != entry["sha256"]:
                    raise CheckFailed(f"{entry['path']} does not match its sha256 in the manifest")
                os.fsync(fd)
            finally:
                os.close(fd)

        big = [e for e in record["files"] if e["size"] > blob.RANGE]
        small = [e for e in record["files"] if e["size"] <= blob.RANGE]
        for entry in big:  # each large blob already downloads its ranges concurrently
            one(entry)
        with ThreadPoolExecutor(max_workers=WORKERS) as pool:
            for future in [pool.submit(one, e) for e in small]:
                future.result()
        progress.finish()
    finally:
        os.close(stage_fd)
