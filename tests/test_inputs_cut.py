"""inputs.index and the cuts (inputs.parquet, inputs.text): for small datasets of every format, cut into pieces far
smaller than a row group or a file, every shard range a run could have gives exactly its rows, in order, and a
piece whose bytes changed is refused before anything of it is written."""

from __future__ import annotations

import io
import os
from pathlib import Path

import pytest
from input_fixtures import read, rows, write

from taulib.inputs import index, parquet, source, text
from taulib.rules import inputs as rules

DATA = rows(700, seed=3)
RANGES = [(0, 1), (0, 700), (699, 700), (1, 2), (99, 301), (233, 234), (350, 700), (0, 350), (466, 467)]


def cut(idx: dict, start: int, end: int, scratch: Path) -> bytes:
    out = io.BytesIO()
    slices = rules.slices(idx, start, end)
    if idx["format"] == "parquet":
        def make(name: str) -> int:
            return os.open(scratch / name, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)

        parquet.cut(idx, idx["path"], slices, make, lambda name: (scratch / name).unlink(), out, lambda: None)
        assert not list(scratch.iterdir())  # the sparse copies are gone
    else:
        text.cut(idx, idx["path"], slices, out.write, lambda: None)
    return out.getvalue()


@pytest.mark.parametrize("fmt", ["parquet", "jsonl", "csv"])
def test_every_range_cut_from_small_pieces_is_exactly_its_rows(tmp_path, fmt):
    folder = write(tmp_path / "input", fmt, DATA, files=3, row_group=37)
    idx = index.build({"path": str(folder)}, ["id"], "run", piece_bytes=1024)
    assert idx["rows"] == 700 and all(len(f["pieces"]) > 3 for f in idx["files"])
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    for start, end in RANGES + [(k, k + 50) for k in range(0, 650, 61)]:
        got = tmp_path / f"cut.{fmt}"
        got.write_bytes(cut(idx, start, end, scratch))
        assert read(got, fmt) == DATA[start:end], (start, end)


def test_a_file_without_a_final_newline_is_cut_with_one_so_the_next_file_s_rows_start_on_their_own_line(tmp_path):
    folder = write(tmp_path / "input", "jsonl", DATA[:20], files=2)
    first = folder / "part-000.jsonl"
    first.write_bytes(first.read_bytes().rstrip(b"\n"))
    idx = index.build({"path": str(folder)}, [], "run", piece_bytes=1024)
    assert idx["rows"] == 20
    got = tmp_path / "cut.jsonl"
    got.write_bytes(cut(idx, 8, 12, tmp_path))
    assert read(got, "jsonl") == DATA[8:12]


@pytest.mark.parametrize("fmt", ["parquet", "jsonl", "csv"])
def test_a_piece_changed_after_the_index_is_refused_naming_it_and_nothing_of_it_is_written(tmp_path, fmt):
    folder = write(tmp_path / "input", fmt, DATA, files=1, row_group=100)
    idx = index.build({"path": str(folder)}, [], "run", piece_bytes=2048)
    entry = idx["files"][0]
    piece = entry["pieces"][2]
    path = folder / entry["name"]
    raw = bytearray(path.read_bytes())
    at = piece["offset"] + piece["length"] // 2 if fmt == "parquet" else raw.index(b"a", piece["offset"] + 10)
    raw[at] ^= 0x02
    path.write_bytes(bytes(raw))
    start = piece["row_start"]
    (tmp_path / "scratch").mkdir()
    with pytest.raises(source.Changed) as err:
        cut(idx, start, start + 1, tmp_path / "scratch")
    what = "row group 2" if fmt == "parquet" else f"bytes {piece['offset']}..{piece['offset'] + piece['length']}"
    assert err.value.message.startswith(f"input changed: {entry['name']} ({path}) {what}")
    assert not list((tmp_path / "scratch").iterdir())  # the sparse copy went with the refusal
    got = tmp_path / f"before.{fmt}"
    got.write_bytes(cut(idx, 0, piece["row_start"], tmp_path / "scratch"))  # the pieces before it still cut
    assert read(got, fmt) == DATA[:piece["row_start"]]


def test_a_file_resized_or_replaced_by_a_symlink_is_refused_with_its_own_message(tmp_path):
    folder = write(tmp_path / "input", "csv", DATA[:50], files=1)
    idx = index.build({"path": str(folder)}, [], "run")
    path = folder / "part-000.csv"
    path.write_bytes(path.read_bytes() + b"50,extra\n")
    with pytest.raises(source.Changed) as err:
        cut(idx, 0, 1, tmp_path)
    size = path.stat().st_size
    assert err.value.message == (f"input changed: part-000.csv ({path}) is {size} bytes; the run's index recorded "
                                 f"{size - 9}")
    path.rename(tmp_path / "moved.csv")
    path.symlink_to(tmp_path / "moved.csv")
    with pytest.raises(source.Changed) as err:
        cut(idx, 0, 1, tmp_path)
    assert err.value.message == (f"input changed: part-000.csv ({path}) is now a symbolic link; tau never follows "
                                 "one it did not index")
