"""Datasets for runs over an input (tests/test_input*.py, tests/integration/test_slurm_inputs.py): the same rows as
Parquet (several files, several row groups each), JSON lines and CSV (whose text fields hold quotes, commas and
newlines), and a client that reads its shard's rows from TAU_INPUT_FILE."""

from __future__ import annotations

import csv
import json
import random
from pathlib import Path

from helpers import PYTHON, ROOT

CLIENT = str(ROOT / "tests" / "clients" / "input_client.py")
WORDS = ["alpha", "beta", "gamma", "delta", "é", "naïve", "x,y", 'say "hi"', "two\nlines", "日本"]


def rows(count: int, seed: int = 7) -> list[dict]:
    """`count` rows {id, prompt}: ids 0.., prompts of 1-12 words, some with quotes, commas, newlines, unicode."""
    rng = random.Random(seed)
    return [{"id": i, "prompt": " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 12)))} for i in range(count)]


def write(folder: Path, fmt: str, data: list[dict], files: int = 3, row_group: int = 4000) -> Path:
    """`data` as `files` files of format `fmt` in `folder` (made), in sorted name order; Parquet files get row
    groups of `row_group` rows."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    folder.mkdir(parents=True)
    size = -(-len(data) // files)
    for k in range(files):
        part = data[k * size:(k + 1) * size]
        path = folder / f"part-{k:03d}.{fmt}"
        if fmt == "parquet":
            pq.write_table(pa.table({"id": [r["id"] for r in part], "prompt": [r["prompt"] for r in part]}), path,
                           row_group_size=row_group)
        elif fmt == "jsonl":
            path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in part), encoding="utf-8")
        else:
            with open(path, "w", newline="", encoding="utf-8") as fh:
                out = csv.writer(fh)
                out.writerow(["id", "prompt"])
                out.writerows([r["id"], r["prompt"]] for r in part)
    return folder


def read(path: Path, fmt: str) -> list[dict]:
    """The rows of one input file (an attempt's TAU_INPUT_FILE), as {id, prompt} with integer ids."""
    import pyarrow.parquet as pq

    if fmt == "parquet":
        return pq.read_table(path).to_pylist()
    if fmt == "jsonl":
        return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    with open(path, newline="", encoding="utf-8") as fh:
        return [{"id": int(r["id"]), "prompt": r["prompt"]} for r in csv.DictReader(fh)]


def request(folder: Path, shards: int = 17, keep: bool = True, **extra) -> dict:
    """A plan request over `folder`: `shards` shards, the input client, the ids kept."""
    doc = {"input": {"path": str(folder)}, "shards": shards, "command": [PYTHON, CLIENT],
           "scheduler": {"profile": "local", "local": {"max_parallel": 4}},
           "windows": {"accounting_lag_seconds": 5, "preemption_seconds": 5, "submission_visibility_seconds": 5}}
    if keep:
        doc["output"] = {"keep_input": ["id"]}
    for key, value in extra.items():
        doc[key] = {**doc.get(key, {}), **value} if isinstance(value, dict) else value
    return doc
