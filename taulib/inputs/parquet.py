"""Parquet inputs: a file's index from its footer and one pass over its bytes, and a shard's rows cut from the row
groups it needs, decoded only from bytes that were verified.

Index (tau-init): the footer gives the rows and each row group's byte range (from its first column chunk's first
page, a dictionary's when it has one, to its last chunk's end); each row group is a piece, and everything after the
last one (the page indexes, bloom filters and the footer) is the file's `shared` range. The file is read once, its
sha256 computed on a second thread (`source.Beside`) while this one hashes the pieces.
Cut (the allocation): for each file the shard needs, its shared range and needed row groups are copied, hashed as
they are read, to the same offsets of a private sparse file in the attempt's folder (holes elsewhere: no other byte
of the input is read or stored); a digest that differs fails the attempt before anything is decoded. Arrow then
reads the row groups from that copy, which only verified bytes reached, in batches of READ_ROWS rows, and the
shard's rows are written as one Parquet file. Memory: one read of source.READ bytes, Arrow's buffered reads of a
column chunk (BUFFER bytes at a time) and a batch.
Reads: the input files. Writes: the sparse copies and the shard's file, through the callables the caller gives.
"""

from __future__ import annotations

import hashlib
import os
from typing import TYPE_CHECKING, Any

from taulib.errors import BadInput
from taulib.inputs import source

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    from taulib.jsonio import Record

READ_ROWS = 8192  # rows decoded at a time
BUFFER = 1 << 20  # Arrow's buffered reads of a column chunk
MAGIC = b"PAR1"


def _metadata(fd: int, shown: str) -> Any:
    import pyarrow.parquet as pq

    try:
        with os.fdopen(os.dup(fd), "rb") as fh:
            return pq.ParquetFile(fh).metadata
    except Exception as exc:  # pyarrow raises ArrowInvalid / OSError for a file that is not Parquet
        raise BadInput(f"plan on standard input: input {shown} is not a readable Parquet file: {exc}",
                       path=shown) from None


def groups(meta: Any) -> list[tuple[int, int, int]]:
    """(offset, length, rows) of each row group: from its first column chunk's first page to its last's end."""
    out = []
    for g in range(meta.num_row_groups):
        group = meta.row_group(g)
        start, end = None, 0
        for c in range(group.num_columns):
            chunk = group.column(c)
            first = chunk.dictionary_page_offset if chunk.has_dictionary_page and chunk.dictionary_page_offset \
                else chunk.data_page_offset
            start = first if start is None else min(start, first)
            end = max(end, first + chunk.total_compressed_size)
        out.append((start or len(MAGIC), end - (start or len(MAGIC)), group.num_rows))
    return out


def index_file(path: str, shown: str, row_start: int, read: Callable[[int], object] | None = None
               ) -> tuple[Record, Any]:
    """(the file's index entry, its Arrow schema) of one Parquet file whose first row is the input's `row_start`;
    `read` is told the bytes of each read (a progress meter)."""
    try:
        fd = source.open_file(path)
    except (OSError, ValueError) as exc:
        raise BadInput(f"plan on standard input: input {shown} cannot be read: "
                       f"{exc.strerror if isinstance(exc, OSError) else exc}", path=shown) from None
    try:
        meta = _metadata(fd, shown)
        size = os.fstat(fd).st_size
        ranges = groups(meta)
        tail = max([len(MAGIC)] + [offset + length for offset, length, _ in ranges])
        if any(offset < len(MAGIC) or offset + length > tail for offset, length, _ in ranges) or \
                any(a[0] + a[1] > b[0] for a, b in zip(ranges, ranges[1:], strict=False)):
            raise BadInput(f"plan on standard input: input {shown}'s row groups overlap or lie outside the file; "
                           "tau cannot verify them apart", path=shown)
        hashes = [hashlib.sha256() for _ in ranges] + [hashlib.sha256()]
        spans = [(offset, offset + length) for offset, length, _ in ranges] + [(tail, size)]
        whole = source.Beside()
        done = 0
        try:
            while data := os.pread(fd, source.READ, done):
                whole.update(data)
                if read is not None:
                    read(len(data))
                view = memoryview(data)
                for sha, (a, b) in zip(hashes, spans, strict=True):  # few spans meet a read: the others are passed
                    if a < done + len(data) and done < b:
                        sha.update(view[max(a, done) - done:min(b, done + len(data)) - done])
                done += len(data)
            digest = whole.hexdigest()
        finally:
            whole.close()
        if done != size:
            raise BadInput(f"plan on standard input: input {shown} changed while tau-init read it", path=shown)
        pieces, row = [], row_start
        for (offset, length, rows), sha in zip(ranges, hashes[:-1], strict=True):
            pieces.append({"offset": offset, "length": length, "sha256": sha.hexdigest(), "row_start": row,
                           "rows": rows})
            row += rows
        entry = {"name": "", "size": size, "sha256": digest, "row_start": row_start, "rows": meta.num_rows,
                 "shared": {"offset": tail, "length": size - tail, "sha256": hashes[-1].hexdigest()},
                 "pieces": pieces}
        return entry, meta.schema.to_arrow_schema().remove_metadata()
    finally:
        os.close(fd)


def cut(index: Record, root: str, slices: list[tuple[int, int, list[tuple[int, int, int]]]],
        scratch: Callable[[str], int], drop: Callable[[str], object], out: Any,
        stopping: Callable[[], None]) -> int:
    """Write the rows `slices` names (`rules.inputs.slices`) into the Parquet file `out` (a writable file object),
    verifying every byte decoded (see the module docstring); `scratch(name)` makes a private file (its descriptor,
    open for reading and writing) and `drop(name)` removes it; `stopping` is called between reads (it raises to
    stop). Returns the rows written. Raises source.Changed, or source.Unreadable for a verified row group Arrow
    cannot decode."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    writer = None
    written = 0
    try:
        for number, _, pieces in slices:
            entry = index["files"][number]
            path = os.path.join(root, entry["name"]) if entry["name"] else root
            shown = entry["name"] or os.path.basename(root)
            name = f"input-copy-{number:05d}.parquet"
            copy_fd = scratch(name)
            try:
                _verified_copy(entry, [k for k, _, _ in pieces], path, shown, copy_fd, stopping)
                try:
                    batches = _batches(pq.ParquetFile(f"/proc/self/fd/{copy_fd}", buffer_size=BUFFER,
                                                  pre_buffer=False), entry,
                                       pieces, stopping)
                    for batch in batches:
                        if writer is None:
                            writer = pq.ParquetWriter(out, batch.schema)
                        writer.write_batch(batch)
                        written += batch.num_rows
                except (pa.ArrowException, OSError) as exc:
                    raise source.Unreadable(f"input {shown} ({path}): a row group that matches the run's index "
                                            f"cannot be read: {str(exc)[:300]}") from None
            finally:
                os.close(copy_fd)
                drop(name)
        assert written, "a shard has rows"
    finally:
        if writer is not None:
            writer.close()
    return written


def _verified_copy(entry: Record, numbers: list[int], path: str, shown: str, copy_fd: int,
                   stopping: Callable[[], None]) -> None:
    try:
        fd = source.open_file(path)
    except (OSError, ValueError) as exc:
        raise source.gone(path, exc, shown) from None
    try:
        size = os.fstat(fd).st_size
        if size != entry["size"]:
            raise source.Changed(f"input changed: {shown} ({path}) is {size} bytes; the run's index recorded "
                                 f"{entry['size']}")
        os.ftruncate(copy_fd, size)
        os.pwrite(copy_fd, MAGIC, 0)
        shared = entry["shared"]
        if source.hash_range(fd, shared["offset"], shared["length"], copy_fd) != shared["sha256"]:
            raise source.Changed(f"input changed: {shown} ({path}): its footer differs from the one the run's "
                                 "index recorded")
        for k in numbers:
            stopping()
            piece = entry["pieces"][k]
            if source.hash_range(fd, piece["offset"], piece["length"], copy_fd) != piece["sha256"]:
                raise source.Changed(f"input changed: {shown} ({path}) row group {k} (rows {piece['row_start']}.."
                                     f"{piece['row_start'] + piece['rows']}) differs from the run's index")
    finally:
        os.close(fd)


def _batches(pf: Any, entry: Record, pieces: list[tuple[int, int, int]],
             stopping: Callable[[], None]) -> Iterator[Any]:
    for k, skip, take in pieces:
        position = 0
        for batch in pf.iter_batches(batch_size=READ_ROWS, row_groups=[k], use_threads=False):
            stopping()
            lo, hi = max(skip - position, 0), min(skip + take - position, batch.num_rows)
            position += batch.num_rows
            if hi > lo:
                yield batch if (lo, hi) == (0, batch.num_rows) else batch.slice(lo, hi - lo)
            if position >= skip + take:
                break
