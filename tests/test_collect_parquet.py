"""tau-collect in Parquet: a winner's row groups copied unchanged where they fit (taulib.collect.parquet), the other
rows encoded; the footer tau writes itself (taulib.collect.thrift). The bytes are a function of the winners and the
plan (tau-run(5) "DEST/_tau_collection.json"); the rows are the winners' rows, in order."""

from __future__ import annotations

import hashlib
import io
import json
import os
import random
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from helpers import PYTHON, copy_run, error_of, module_workspace, settle, snapshot, tau

from taulib.collect import parquet, thrift
from taulib.errors import Conflict

# A client that writes its shard's rows as one Parquet file in row groups of --group rows; --field-ids SHARD gives
# that shard's columns Parquet field ids (the same column names and types, other field metadata); --legacy-lists
# writes the list column in the Parquet schema of older writers (not the one pyarrow writes for it by default).
CLIENT = '''
import argparse, hashlib, os
import pyarrow as pa, pyarrow.parquet as pq
parser = argparse.ArgumentParser()
parser.add_argument("--group", type=int, required=True)
parser.add_argument("--field-ids", default="")
parser.add_argument("--legacy-lists", action="store_true")
args = parser.parse_args()
start, end, shard = int(os.environ["TAU_RECORD_START"]), int(os.environ["TAU_RECORD_END"]), os.environ["TAU_SHARD_ID"]
ids = list(range(start, end))
columns = {"id": pa.array(ids, pa.int64()), "cat": pa.array(["abcde"[i % 5] for i in ids]),
           "tags": pa.array([[i % 3] * (i % 3) for i in ids], pa.list_(pa.int64())),
           "value": pa.array([i / 7 for i in ids]),
           "text": pa.array([hashlib.sha256(b"%d" % i).hexdigest()[:24] for i in ids])}
fields = [pa.field(name, column.type, metadata={"PARQUET:field_id": str(n + 1)} if shard == args.field_ids else None)
          for n, (name, column) in enumerate(columns.items())]
table = pa.Table.from_arrays(list(columns.values()), schema=pa.schema(fields))
pq.write_table(table, os.path.join(os.environ["TAU_OUTPUT_DIR"], "part-00000.parquet"), row_group_size=args.group,
               use_compliant_nested_type=not args.legacy_lists)
'''

SHARD_ROWS = 30_000  # each winner: one file of 30,000 rows


def make_run(workspace: Path, *options: str, group: int = SHARD_ROWS, shards: int = 4) -> Path:
    workspace.mkdir(mode=0o700, parents=True, exist_ok=True)
    client = workspace / "client.py"
    client.write_text(CLIENT)
    run_dir = workspace / "run"
    doc = {"records": shards * SHARD_ROWS, "shards": shards,
           "command": [PYTHON, str(client), "--group", str(group), *options],
           "scheduler": {"profile": "local", "local": {"max_parallel": 2}},
           "output": {"format": "parquet", "rows_per_partition": 45_000}}
    assert tau("tau-init", str(run_dir), input=json.dumps(doc)).returncode == 0
    assert tau("tau-submit", str(run_dir)).returncode == 0
    assert settle(run_dir)["state"] == "succeeded"
    return run_dir


def winner_files(run_dir: Path) -> list[Path]:
    files = []
    for n in range(len(list((run_dir / "shards").iterdir()))):
        winner = json.loads((run_dir / "shards" / f"shard-{n:05d}" / "winner.json").read_text())
        attempt = winner["attempt_id"]
        files += sorted((run_dir / "shards" / f"shard-{n:05d}" / "attempts" / attempt / "dataset").glob("*.parquet"))
    return files


def collect(run_dir: Path, dest: Path, *options: str) -> dict:
    proc = tau("tau-collect", str(run_dir), "--destination", str(dest), *options)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def chunks(path: Path) -> list[list[bytes]]:
    """Each row group's column chunks' bytes, as pyarrow's metadata places them."""
    data, meta = path.read_bytes(), pq.ParquetFile(path).metadata
    out = []
    for g in range(meta.num_row_groups):
        group = []
        for c in range(meta.num_columns):
            col = meta.row_group(g).column(c)
            start = col.dictionary_page_offset if col.has_dictionary_page else col.data_page_offset
            group.append(data[start:start + col.total_compressed_size])
        out.append(group)
    return out


def groups(path: Path) -> list[int]:
    meta = pq.ParquetFile(path).metadata
    return [meta.row_group(g).num_rows for g in range(meta.num_row_groups)]


@pytest.fixture(scope="module")
def fitting(tmp_path_factory) -> Path:
    """4 winners of one row group of 30,000 rows each, in the Parquet schema pyarrow writes."""
    return make_run(module_workspace(tmp_path_factory, "collect-parquet"))


def test_row_groups_inside_a_partition_are_copied_byte_for_byte_and_the_rest_encoded(fitting, tmp_path):
    run_dir = copy_run(fitting, tmp_path / "ws")
    dest = run_dir.parent / "data"
    result = collect(run_dir, dest)
    files = [dest / f["path"] for f in result["files"]]
    assert [f["rows"] for f in result["files"]] == [45_000, 45_000, 30_000]
    # partition 0: winner 0 whole (copied), then half of winner 1 (encoded); 1: the other half, then winner 2;
    # 2: winner 3
    assert [groups(f) for f in files] == [[30_000, 15_000], [15_000, 30_000], [30_000]]
    winners = winner_files(run_dir)
    assert [chunks(files[0])[0], chunks(files[1])[1], chunks(files[2])[0]] == \
           [chunks(winners[0])[0], chunks(winners[2])[0], chunks(winners[3])[0]]
    for f, entry in zip(files, result["files"], strict=True):  # hashed from the bytes written
        data = f.read_bytes()
        assert (len(data), hashlib.sha256(data).hexdigest()) == (entry["size"], entry["sha256"])
    expected = pa.concat_tables(pq.read_table(w) for w in winners).replace_schema_metadata(None)
    got = pa.concat_tables(pq.read_table(f) for f in files).replace_schema_metadata(None)
    assert got.equals(expected)
    copied, winner = pq.ParquetFile(files[1]).metadata.row_group(1), pq.ParquetFile(winners[2]).metadata.row_group(0)
    for c in range(winner.num_columns):  # the chunks' statistics come along with them
        assert copied.column(c).statistics == winner.column(c).statistics
    assert pq.ParquetFile(files[0]).schema_arrow.remove_metadata() == expected.schema


def test_the_bytes_are_the_same_for_any_number_of_tasks_and_again_on_a_second_collection(fitting, tmp_path):
    run_dir = copy_run(fitting, tmp_path / "ws")
    seen = []
    for n, tasks in enumerate(("1", "2", "3", "1")):
        dest = run_dir.parent / f"data-{n}"
        collect(run_dir, dest, "--tasks", tasks, "--rows-per-partition", "45000")
        seen.append({p.name: p.read_bytes() for p in sorted(dest.glob("part-*"))})
    assert len(seen[0]) == 3 and all(s == seen[0] for s in seen)


def test_a_partition_boundary_on_a_row_group_boundary_copies_every_group(fitting, tmp_path):
    run_dir = copy_run(fitting, tmp_path / "ws")
    dest = run_dir.parent / "data"
    result = collect(run_dir, dest, "--rows-per-partition", "60000")
    files = [dest / f["path"] for f in result["files"]]
    winners = winner_files(run_dir)
    assert [groups(f) for f in files] == [[30_000, 30_000], [30_000, 30_000]]
    assert [chunks(f) for f in files] == [chunks(winners[0]) + chunks(winners[1]),
                                         chunks(winners[2]) + chunks(winners[3])]


def test_row_groups_too_small_to_copy_are_encoded_into_groups_of_the_tables_size(tmp_path):
    run_dir = make_run(tmp_path / "ws", group=parquet.COPY_ROWS - 1, shards=2)
    dest = run_dir.parent / "data"
    result = collect(run_dir, dest, "--rows-per-partition", "60000")
    files = [dest / f["path"] for f in result["files"]]
    assert [groups(f) for f in files] == [[60_000]]
    expected = pa.concat_tables(pq.read_table(w) for w in winner_files(run_dir)).replace_schema_metadata(None)
    assert pq.read_table(files[0]).replace_schema_metadata(None).equals(expected)


def test_winners_in_a_parquet_schema_pyarrow_would_not_write_are_decoded_and_encoded(tmp_path):
    run_dir = make_run(tmp_path / "ws", "--legacy-lists")
    dest = run_dir.parent / "data"
    result = collect(run_dir, dest)
    files = [dest / f["path"] for f in result["files"]]
    winners = winner_files(run_dir)
    assert [groups(f) for f in files] == [[45_000], [45_000], [30_000]]  # nothing copied: one encoded run each
    assert chunks(files[2]) != chunks(winners[3])
    expected = pa.concat_tables(pq.read_table(w) for w in winners).replace_schema_metadata(None)
    got = pa.concat_tables(pq.read_table(f) for f in files).replace_schema_metadata(None)
    assert got.equals(expected)


def test_winners_whose_field_metadata_differs_are_refused_saying_how_and_nothing_is_published(tmp_path):
    run_dir = make_run(tmp_path / "ws", "--field-ids", "shard-00001", shards=2)
    dest = run_dir.parent / "data"
    proc = tau("tau-collect", str(run_dir), "--destination", str(dest))
    assert proc.returncode == 1, proc.stderr
    assert error_of(proc)["message"] == (
        "tau-collect: the winners have incompatible schemas: shard-00001 has other columns than shard-00000 "
        "(shard-00001: the same column names and types, with other field metadata (Parquet field ids)); refusing "
        "to collect")
    assert not dest.exists()
    assert not [n for n in os.listdir(run_dir.parent) if ".tau-stage-" in n]


@pytest.mark.parametrize("fmt", ["parquet", "jsonl"])
def test_winners_larger_than_the_input_buffer_are_read_through_their_descriptor_to_the_same_bytes(fitting, tmp_path,
                                                                                                  monkeypatch, fmt):
    import taulib.api as tau_api
    from taulib.collect import budget, inputs

    run_dir = copy_run(fitting, tmp_path / "ws")
    buffered = run_dir.parent / "buffered"
    collect(run_dir, buffered, "--format", fmt)
    monkeypatch.setattr(budget, "CEILING", 0)  # no input buffer: each winner hashed, then copied or decoded from its fd
    monkeypatch.setattr(inputs, "READ_CHUNK", 4096)  # the scratch a winner is hashed and copied through
    through = run_dir.parent / "through"
    tau_api.open(run_dir).collect(through, fmt)
    names = sorted(p.name for p in buffered.glob("part-*"))
    assert len(names) == 3 and names == sorted(p.name for p in through.glob("part-*"))
    assert all((buffered / n).read_bytes() == (through / n).read_bytes() for n in names)
    if fmt == "parquet":
        assert groups(through / names[0]) == [30_000, 15_000]  # winner 0's row group copied


def test_csv_of_a_run_with_a_nested_column_is_refused_before_anything_is_written(fitting, tmp_path):
    run_dir = copy_run(fitting, tmp_path / "ws")
    before = snapshot(run_dir)
    proc = tau("tau-collect", str(run_dir), "--destination", str(run_dir.parent / "data"), "--format", "csv")
    assert proc.returncode == 2, proc.stderr
    assert error_of(proc)["message"] == ("tau-collect: --format csv cannot hold column 'tags' of type "
                                         "list<element: int64>; collect this run as parquet or jsonl")
    assert snapshot(run_dir) == before
    assert sorted(os.listdir(run_dir.parent)) == ["run"]


# -- the pieces, in this process -----------------------------------------------------------------------------------

def _sample(tmp_path: Path, rows: int = 40_000, group: int = 20_000, **options) -> Path:
    ids = list(range(rows))
    table = pa.table({"id": pa.array(ids, pa.int64()), "cat": ["xy"[i % 2] for i in ids],
                      "text": [f"row {i}" for i in ids], "tags": [[i] * (i % 2) for i in ids]})
    path = tmp_path / "winner.parquet"
    pq.write_table(table, path, row_group_size=group, **options)
    return path


def _footer(path: Path) -> parquet.Footer:
    fd = os.open(path, os.O_RDONLY)
    try:
        return parquet.footer(fd, os.fstat(fd).st_size, path.name)
    finally:
        os.close(fd)


def _assemble(path: Path, source: parquet.Source) -> bytes:
    found = _footer(path)
    schema = pq.ParquetFile(path).schema_arrow.remove_metadata()
    assert parquet.fits(found, schema)
    sink = io.BytesIO()
    writer = parquet.Writer(sink, schema)
    for rows, group, ranges in found.groups:
        writer.copy(parquet.Span(rows, group, ranges, schema, found, source.hold()))
    source.release()
    assert source.data is None and source.fd is None  # let go of once every row group is copied
    writer.close()
    return sink.getvalue()


def test_a_row_group_is_copied_the_same_from_memory_and_from_a_descriptor_a_few_bytes_at_a_time(tmp_path):
    path = _sample(tmp_path)
    from_memory = _assemble(path, parquet.Source(memoryview(path.read_bytes()), None))
    from_fd = _assemble(path, parquet.Source(None, os.open(path, os.O_RDONLY), memoryview(bytearray(1000))))
    assert from_memory == from_fd
    out = tmp_path / "out.parquet"
    out.write_bytes(from_fd)
    assert pq.read_table(out).equals(pq.read_table(path))
    assert chunks(out) == chunks(path)


@pytest.mark.parametrize("options, fits", [({}, True), ({"write_page_index": True}, True),
                                          ({"compression": "zstd"}, True), ({"use_dictionary": False}, True),
                                          ({"version": "1.0"}, True), ({"use_compliant_nested_type": False}, False)])
def test_what_fits_is_decided_by_the_parquet_schema_only(tmp_path, options, fits):
    path = _sample(tmp_path, **options)
    found = _footer(path)
    assert found.copyable and found.rows == 40_000 and [g[0] for g in found.groups] == [20_000] * 2
    schema = pq.ParquetFile(path).schema_arrow.remove_metadata()
    assert parquet.fits(found, schema) is fits
    other = schema.set(0, pa.field("id", pa.int64(), metadata={"PARQUET:field_id": "9"}))
    assert not parquet.fits(found, other)
    if not fits:
        return
    out = tmp_path / "out.parquet"
    out.write_bytes(_assemble(path, parquet.Source(memoryview(path.read_bytes()), None)))
    assert pq.read_table(out).equals(pq.read_table(path))


@pytest.mark.parametrize("damage, message", [
    (lambda d: b"", "is not a Parquet file"),
    (lambda d: d[:-1], "is not a Parquet file"),
    (lambda d: b"PAR0" + d[4:], "is not a Parquet file"),
    (lambda d: d[:-8] + (len(d)).to_bytes(4, "little") + b"PAR1", "is not a Parquet file"),
    (lambda d: d[:-9] + b"\x0d" + d[-8:], "has a footer tau cannot read"),
])
def test_a_file_that_is_not_parquet_or_whose_footer_is_damaged_is_a_conflict_naming_it(tmp_path, damage, message):
    path = _sample(tmp_path)
    path.write_bytes(damage(path.read_bytes()))
    with pytest.raises(Conflict) as err:
        _footer(path)
    assert err.value.code == Conflict.code and err.value.message.startswith(f"winner.parquet {message}"), \
        err.value.message


def test_a_damaged_footer_is_read_or_refused_with_a_conflict_and_never_anything_else(tmp_path):
    path = _sample(tmp_path)
    data = path.read_bytes()
    length = int.from_bytes(data[-8:-4], "little")
    start = len(data) - 8 - length
    rng = random.Random(7)
    outcomes = {"read": 0, "refused": 0}
    for _ in range(600):
        damaged = bytearray(data)
        for _ in range(rng.randint(1, 3)):
            damaged[rng.randrange(start, len(data) - 8)] = rng.randrange(256)
        path.write_bytes(bytes(damaged))
        try:
            found = _footer(path)
        except Conflict as exc:
            assert exc.code == Conflict.code and exc.message.startswith("winner.parquet "), exc.message
            outcomes["refused"] += 1
        else:
            assert found.rows == sum(g[0] for g in found.groups) and all(g[0] >= 0 for g in found.groups)
            outcomes["read"] += 1
    assert outcomes["read"] > 50 and outcomes["refused"] > 50, outcomes


def test_a_row_group_missing_a_column_chunk_is_never_copied(tmp_path):
    path = _sample(tmp_path)
    found = _footer(path)
    meta = found.meta
    groups = thrift.get(meta, parquet.FILE_GROUPS)
    first = groups.values[0]
    columns = thrift.get(first, parquet.GROUP_COLUMNS)
    short = thrift.put(first, parquet.GROUP_COLUMNS, thrift.LIST, thrift.Seq(columns.type, columns.values[:-1]))
    encoded = thrift.encode(thrift.put(meta, parquet.FILE_GROUPS, thrift.LIST,
                                       thrift.Seq(groups.type, [short] + groups.values[1:])))
    data = path.read_bytes()
    length = int.from_bytes(data[-8:-4], "little")
    path.write_bytes(data[:-8 - length] + encoded + len(encoded).to_bytes(4, "little") + b"PAR1")
    assert not _footer(path).copyable


# -- the Thrift compact codec --------------------------------------------------------------------------------------

def _footers(tmp_path: Path) -> list[bytes]:
    """The footers pyarrow writes for a schema of every kind of column, with statistics, page indexes and key-value
    metadata."""
    table = pa.table({
        "b": [True, False, None], "i8": pa.array([1, -2, 3], pa.int8()), "u64": pa.array([0, 2**63, 5], pa.uint64()),
        "f": [1.5, None, -0.0], "s": ["a", "bb", None], "bin": [b"\x00", b"", b"\xff" * 40],
        "ts": pa.array([0, 10**18, None], pa.timestamp("ns", tz="UTC")), "d": pa.array([1, 2, 3], pa.date32()),
        "dec": pa.array([1, 2, 3], pa.decimal128(20, 4)),
        "lst": [[1, 2], [], None], "st": [{"x": 1, "y": "a"}, None, {"x": 3, "y": None}],
        "m": pa.array([[("k", 1)], [], None], pa.map_(pa.string(), pa.int64())),
        "dict": pa.array(["p", "q", "p"]).dictionary_encode()})
    table = table.replace_schema_metadata({"owner": "tau", "empty": ""})
    footers = []
    for n, options in enumerate(({}, {"write_page_index": True}, {"version": "1.0", "compression": "gzip"},
                                 {"write_statistics": False, "use_dictionary": False})):
        path = tmp_path / f"f{n}.parquet"
        pq.write_table(table, path, row_group_size=2, **options)
        data = path.read_bytes()
        length = int.from_bytes(data[-8:-4], "little")
        footers.append(data[-8 - length:-8])
    return footers


def test_every_footer_pyarrow_writes_is_read_and_written_back_to_the_same_bytes(tmp_path):
    for data in _footers(tmp_path):
        struct = thrift.decode(data)
        assert thrift.encode(struct) == data
        assert thrift.get(struct, parquet.FILE_ROWS) == 3


def test_every_truncation_of_a_footer_is_malformed_and_nothing_else(tmp_path):
    data = _footers(tmp_path)[0]
    for end in range(len(data)):
        with pytest.raises(thrift.Malformed):
            thrift.decode(data[:end])
    with pytest.raises(thrift.Malformed, match="bytes after the struct"):
        thrift.decode(data + b"\x00")


def test_damaged_footers_decode_or_are_malformed_and_never_raise_anything_else(tmp_path):
    footers = _footers(tmp_path)
    rng = random.Random(23)
    outcomes = {"decoded": 0, "malformed": 0}
    for _ in range(3000):
        data = bytearray(rng.choice(footers))
        for _ in range(rng.randint(1, 4)):
            data[rng.randrange(len(data))] = rng.randrange(256)
        try:
            struct = thrift.decode(bytes(data))
        except thrift.Malformed:
            outcomes["malformed"] += 1
        else:
            outcomes["decoded"] += 1
            assert thrift.decode(thrift.encode(struct)) == struct
    assert outcomes["decoded"] > 100 and outcomes["malformed"] > 100, outcomes


@pytest.mark.parametrize("data, message", [
    (b"\x1c" * 100 + b"\x00" * 100, "nested deeper than 32"),
    (b"\x19\xfc\xff\xff\xff\xff\xff\xff\xff\xff\x0f", "ends inside a value"),  # a list of 2**64 structs
    (b"\x15" + b"\xff" * 11, "a varint longer than 10 bytes"),
    (b"\x18\x20abc", "ends inside a binary value"),
    (b"\x1d", "unknown type 13"),
])
def test_input_built_to_exhaust_the_reader_is_malformed_quickly(data, message):
    with pytest.raises(thrift.Malformed, match=message):
        thrift.decode(data)


def test_put_and_drop_keep_the_fields_in_id_order():
    struct = [thrift.Field(1, thrift.I32, 5), thrift.Field(4, thrift.BINARY, b"x")]
    changed = thrift.put(thrift.put(struct, 3, thrift.I64, 7), 1, thrift.I32, 6)
    assert [f.id for f in changed] == [1, 3, 4] and thrift.get(changed, 1) == 6 and thrift.get(changed, 3) == 7
    assert thrift.drop(changed, 3, 4) == [thrift.Field(1, thrift.I32, 6)]
    assert thrift.decode(thrift.encode(changed)) == changed
    assert struct == [thrift.Field(1, thrift.I32, 5), thrift.Field(4, thrift.BINARY, b"x")]  # copies, not changes


@pytest.mark.parametrize("rows,values", [(1, 1), (2, 1), (2, 2), (4096, 2048), (4097, 2048), (4097, 2049),
                                         (9000, 4500), (9000, 4501), (9000, 9000), (9000, 3)])
def test_the_dictionary_rule_counted_by_hashes_decides_as_count_distinct_does(rows, values):
    import pyarrow.compute as pc

    rng = random.Random(rows * 31 + values)
    for kind in (pa.string(), pa.large_string(), pa.binary()):
        picked = [rng.randrange(values) for _ in range(rows)]
        data = [None if p == 0 and rows > 2 else (f"v{p}".encode() if kind == pa.binary() else f"v{p}") for p in picked]
        for column in (pa.array(data, kind), pa.chunked_array([pa.array(data[:rows // 2], kind),
                                                               pa.array(data[rows // 2:], kind)])):
            expected = pc.count_distinct(column, mode="all").as_py() <= parquet.DICTIONARY_SHARE * rows
            assert parquet._repeat(column) == expected
