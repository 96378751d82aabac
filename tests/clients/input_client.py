#!/usr/bin/env python3
"""A client of a run over a dataset: reads its shard's rows from TAU_INPUT_FILE (in TAU_INPUT_FORMAT), writes one
answer per row (`seen_id`: the id it read, `answer`: the prompt upper-cased) as two Parquet files. Environment:
INPUT_CLIENT_DROP=N writes N rows fewer; INPUT_CLIENT_TOUCH=1 appends to TAU_INPUT_FILE before exiting;
INPUT_CLIENT_RECORD=FOLDER writes the variables it got there (by shard); INPUT_CLIENT_SOURCE=1 reads the first
source file TAU_INPUT_PIECES names, tries to append to it, and says what happened in source-check.json beside
TAU_OUTPUT_DIR."""

import csv
import json
import os

import pyarrow as pa
import pyarrow.parquet as pq

path, fmt = os.environ["TAU_INPUT_FILE"], os.environ["TAU_INPUT_FORMAT"]
if fmt == "parquet":
    rows = pq.read_table(path).to_pylist()
elif fmt == "jsonl":
    with open(path, encoding="utf-8") as fh:
        rows = [json.loads(line) for line in fh]
else:
    with open(path, newline="", encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
rows = rows[:len(rows) - int(os.environ.get("INPUT_CLIENT_DROP", "0"))]
table = pa.table({"seen_id": [int(r["id"]) for r in rows], "answer": [r["prompt"].upper() for r in rows]})
half = len(rows) // 2
out = os.environ["TAU_OUTPUT_DIR"]
pq.write_table(table.slice(0, half), os.path.join(out, "a.parquet"))
pq.write_table(table.slice(half), os.path.join(out, "b.parquet"))
if os.environ.get("INPUT_CLIENT_TOUCH"):
    with open(path, "ab") as fh:
        fh.write(b"\n")
record = os.environ.get("INPUT_CLIENT_RECORD")
if record:
    with open(os.path.join(record, os.environ["TAU_SHARD_ID"] + ".json"), "w") as fh:
        json.dump({k: v for k, v in os.environ.items() if k.startswith("TAU_INPUT_")}, fh)
if os.environ.get("INPUT_CLIENT_SOURCE"):
    with open(os.environ["TAU_INPUT_PIECES"]) as fh:
        first = json.load(fh)["files"][0]["path"]
    with open(first, "rb") as fh:
        head = fh.read(4).decode("latin-1")
    try:
        with open(first, "ab"):
            pass
        appended = "yes"
    except OSError as exc:
        appended = exc.strerror
    with open(os.path.join(os.path.dirname(out), "source-check.json"), "w") as fh:
        json.dump({"head": head, "append": appended}, fh)
