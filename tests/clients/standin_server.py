#!/usr/bin/env python3
"""A small OpenAI-compatible model server, a stand-in for vLLM in tau's tests of services: it listens on
127.0.0.1:PORT and answers

  GET  /health          503 until it is "loaded" (--ready-after seconds after it started), then 200
  GET  /v1/models       {"object": "list", "data": [{"id": MODEL}]} once loaded (503 before)
  POST /v1/completions  {"choices": [{"text": ...}]}: the prompt reversed and upper-cased, with the model, service
                        and backend that answered, so a client's rows show which backend wrote them

  --port P          the port (default: TAU_SERVICE_PORT)
  --model NAME      the model it serves (default: stand-in)
  --ready-after S   seconds before /health answers 200 (default 0; TAU_SERVICE_BACKEND is added, times
                    --stagger, so that backends become ready one after the other)
  --stagger S       see --ready-after (default 0)
  --exit-after S    exit with status 3 after S seconds (a server that dies while it loads)
  --never-ready     /health never answers 200
  --child           start a child process (sleep) in its own process group, as a server's worker would be
  --pid-dir DIR     write its pid (and its child's) into DIR/SHARD-ATTEMPT-NAME-BACKEND.pid (and .child.pid)
It prints one line when it listens, and one per request.
"""

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, default=int(os.environ.get("TAU_SERVICE_PORT", "0")))
    parser.add_argument("--model", default="stand-in")
    parser.add_argument("--ready-after", type=float, default=0.0)
    parser.add_argument("--stagger", type=float, default=0.0)
    parser.add_argument("--exit-after", type=float, default=None)
    parser.add_argument("--never-ready", action="store_true")
    parser.add_argument("--child", action="store_true")
    parser.add_argument("--pid-dir", default=None)
    args = parser.parse_args()
    name = os.environ.get("TAU_SERVICE_NAME", "standin")
    backend = os.environ.get("TAU_SERVICE_BACKEND", "1")
    started = time.monotonic()
    ready_at = started + args.ready_after + args.stagger * int(backend)
    child = None
    if args.child:
        child = subprocess.Popen(["sleep", "3600"])
    if args.pid_dir:
        me = f"{os.environ.get('TAU_SHARD_ID', 'shard')}-{os.environ.get('TAU_ATTEMPT_ID', 'attempt')}-{name}-{backend}"
        with open(os.path.join(args.pid_dir, f"{me}.pid"), "w") as fh:
            fh.write(str(os.getpid()))
        if child is not None:
            with open(os.path.join(args.pid_dir, f"{me}.child.pid"), "w") as fh:
                fh.write(str(child.pid))

    def loaded() -> bool:
        return not args.never_ready and time.monotonic() >= ready_at

    class Handler(BaseHTTPRequestHandler):
        def _send(self, status: int, body: dict) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            if self.path == "/health":
                self._send(200 if loaded() else 503, {"status": "ok" if loaded() else "loading"})
            elif self.path == "/v1/models":
                if loaded():
                    self._send(200, {"object": "list", "data": [{"id": args.model, "object": "model"}]})
                else:
                    self._send(503, {"error": "loading"})
            else:
                self._send(404, {"error": "not found"})

        def do_POST(self) -> None:  # noqa: N802
            if self.path != "/v1/completions" or not loaded():
                self._send(404 if loaded() else 503, {"error": "no"})
                return
            request = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))) or b"{}")
            prompt = str(request.get("prompt", ""))
            text = f"{prompt[::-1].upper()} [{args.model} {name}-{backend}]"
            self._send(200, {"id": f"cmpl-{name}-{backend}", "object": "text_completion", "model": args.model,
                             "choices": [{"index": 0, "text": text, "finish_reason": "stop"}],
                             "usage": {"prompt_tokens": len(prompt.split()), "completion_tokens": 1}})

        def log_message(self, fmt: str, *fargs: object) -> None:
            print(f"standin {name}-{backend}: {fmt % fargs}", flush=True)

    server = ThreadingHTTPServer(("127.0.0.1", args.port), Handler)
    print(f"standin {name}-{backend}: pid {os.getpid()} listening on 127.0.0.1:{args.port}, model {args.model}, "
          f"devices {os.environ.get('CUDA_VISIBLE_DEVICES')!r}", flush=True)
    if args.exit_after is not None:
        def die() -> None:
            time.sleep(args.exit_after)
            print(f"standin {name}-{backend}: exiting with 3, as asked", flush=True)
            os._exit(3)

        threading.Thread(target=die, daemon=True).start()
    try:
        server.serve_forever()
    finally:
        if child is not None:
            child.terminate()
    return 0


if __name__ == "__main__":
    sys.exit(main())
