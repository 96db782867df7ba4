#!/usr/bin/env python3
"""Load on `rudder serve` (loopback only): C concurrent clients each sending the same generate request until N
requests are answered, for each C given; beside it, the same N requests run one after another by `rudder generate`
(one process per request, as a script would). Prints requests/s, samples/s, p50/p99 latency and failures, and the
server's RSS at the start and the end.

    python3 bench/serve_load.py [--clients 1,8,32] [--requests 64] [--parallel 1] [--threads 1] [--samples 4]

Run from the repository root after `make` (make bench-serve). Bounded in count: every level sends --requests.
"""
import argparse
import http.client
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RUDDER = os.path.join(ROOT, "build", "bin", "rudder")


def recipe(samples):
    return {"model": "e2e-discrete", "sampler": {"name": "analytic", "steps": 100, "temperature": 0.5}, "samples": samples,
            "controllers": [{"plugin": "length", "params": {"tokens": 12}}, {"plugin": "span", "params": {"prefix": "The Eagle"}}]}


def rss_kb(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def percentile(values, q):
    values = sorted(values)
    return values[min(len(values) - 1, int(round(q * (len(values) - 1))))]


def load(port, clients, requests, body):
    latencies, failures, lock = [], [], threading.Lock()
    remaining = [requests]

    def client():
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
        while True:
            with lock:
                if remaining[0] == 0:
                    break
                remaining[0] -= 1
            start = time.perf_counter()
            try:
                c.request("POST", "/v1/generate", body=body)
                r = c.getresponse()
                r.read()
                ok = r.status == 200
            except (OSError, http.client.HTTPException) as e:
                ok, c = False, http.client.HTTPConnection("127.0.0.1", port, timeout=600)
                r = e
            with lock:
                (latencies if ok else failures).append(time.perf_counter() - start if ok else str(getattr(r, "status", r)))
        c.close()

    start = time.perf_counter()
    threads = [threading.Thread(target=client) for _ in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return time.perf_counter() - start, latencies, failures


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--clients", default="1,8,32")
    ap.add_argument("--requests", type=int, default=64)
    ap.add_argument("--parallel", type=int, default=1)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--samples", type=int, default=4)
    ap.add_argument("--sequential", type=int, default=16, help="requests run one after another by rudder generate")
    args = ap.parse_args()
    body = json.dumps({"recipe": recipe(args.samples)})
    levels = [int(c) for c in args.clients.split(",")]
    server = subprocess.Popen([RUDDER, "serve", "--port", "0", "--threads", str(args.threads), "--parallel", str(args.parallel),
                               "--queue", str(max(levels) + 1)], stderr=subprocess.PIPE, text=True)
    line = server.stderr.readline()
    port = int(line.split("127.0.0.1:")[1].split()[0])
    rss_start = rss_kb(server.pid)
    print(f"rudder serve --parallel {args.parallel} --threads {args.threads}; {args.samples} samples per request "
          f"(e2e-discrete, analytic 100 steps, length + span)")
    print("| clients | requests | failed | requests/s | samples/s | p50 s | p99 s |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    try:
        for clients in levels:
            seconds, latencies, failures = load(port, clients, args.requests, body)
            ok = len(latencies)
            print(f"| {clients} | {args.requests} | {len(failures)} | {ok / seconds:.2f} | {ok * args.samples / seconds:.2f} | "
                  f"{percentile(latencies, 0.5):.3f} | {percentile(latencies, 0.99):.3f} |", flush=True)
        rss_end = rss_kb(server.pid)
    finally:
        server.terminate()
        server.wait(timeout=120)
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(recipe(args.samples), f)
    start = time.perf_counter()
    for i in range(args.sequential):
        subprocess.run([RUDDER, "generate", "-q", "--threads", str(args.threads), "--seed", str(i), f.name],
                       check=True, stdout=subprocess.DEVNULL)
    seconds = time.perf_counter() - start
    os.unlink(f.name)
    print(f"| rudder generate, one after another | {args.sequential} | 0 | {args.sequential / seconds:.2f} | "
          f"{args.sequential * args.samples / seconds:.2f} | | |")
    print(f"server RSS: {rss_start / 1024:.1f} MB at the start, {rss_end / 1024:.1f} MB at the end")


if __name__ == "__main__":
    sys.exit(main())
