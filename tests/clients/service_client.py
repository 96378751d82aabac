#!/usr/bin/env python3
"""A test client for tau runs with services: for each of its records it asks a service for a completion, spreading
its requests over every backend of the service (TAU_SERVICE_<NAME>_URLS), and writes one Parquet file with what each
backend answered.

  --service NAME    the service to ask (default: generator)
  --model NAME      the model to name in requests (default: stand-in)
  --sleep S         sleep S seconds before writing (a client still running, to kill a backend under)
  --report DIR      write its environment and the services file it was given to DIR/client-SHARD-ATTEMPT.json
  --setsid          start `sleep 3600` in a new session first (a server it forgot), its pid in the report folder
"""

import argparse
import json
import os
import subprocess
import sys
import time
import urllib.request


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--service", default="generator")
    parser.add_argument("--model", default="stand-in")
    parser.add_argument("--sleep", type=float, default=0.0)
    parser.add_argument("--report", default=None)
    parser.add_argument("--setsid", action="store_true")
    args = parser.parse_args()
    shard, attempt = os.environ["TAU_SHARD_ID"], os.environ["TAU_ATTEMPT_ID"]
    key = "".join(c if c.isalnum() else "_" for c in args.service.upper())
    urls = os.environ[f"TAU_SERVICE_{key}_URLS"].split(",")
    if args.setsid:
        forgotten = subprocess.Popen(["setsid", "sleep", "3600"])  # not a group leader: setsid(1) execs, no fork
        with open(os.path.join(args.report, f"setsid-{shard}-{attempt}.pid"), "w") as fh:
            fh.write(str(forgotten.pid))
    if args.report:
        with open(os.environ["TAU_SERVICES_FILE"]) as fh:
            services = json.load(fh)
        with open(os.path.join(args.report, f"client-{shard}-{attempt}.json"), "w") as fh:
            json.dump({"env": dict(os.environ), "services": services}, fh)
    start, end = int(os.environ["TAU_RECORD_START"]), int(os.environ["TAU_RECORD_END"])
    rows = {"id": [], "prompt": [], "answer": [], "url": []}
    for record in range(start, end):
        url = urls[record % len(urls)]
        prompt = f"record {record} of {shard}"
        body = json.dumps({"model": args.model, "prompt": prompt, "max_tokens": 16}).encode()
        request = urllib.request.Request(f"{url}/v1/completions", data=body,
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=30) as answer:
            text = json.load(answer)["choices"][0]["text"]
        rows["id"].append(record)
        rows["prompt"].append(prompt)
        rows["answer"].append(text)
        rows["url"].append(url)
    if args.sleep:
        time.sleep(args.sleep)
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.table({"id": pa.array(rows["id"], pa.int64()), "prompt": pa.array(rows["prompt"], pa.string()),
                      "answer": pa.array(rows["answer"], pa.string()), "url": pa.array(rows["url"], pa.string())})
    pq.write_table(table, os.path.join(os.environ["TAU_OUTPUT_DIR"], "part-00000.parquet"))
    print(f"service client: {end - start} records from {len(urls)} backend(s)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
