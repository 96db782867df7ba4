#!/usr/bin/env python3
"""Load on `rudder serve` (loopback only): C concurrent clients each sending the same generate request (no seed,
so requests may share runs) until N requests are answered, for each C given, against two servers side by side: one
that shares runs (--batch 32) and one that does not (--batch 1), the order alternating per level. Beside them, the
same requests run one after another by `rudder generate` (one process per request, as a script would). Prints
requests/s, samples/s, p50/p99 latency, failures and requests per run, the batching gain, and each server's RSS at
the start and the end. --soak S then loads the sharing server for S more seconds at the largest level and reports
its RSS every minute (memory flat under load).

    python3 bench/serve_load.py [--clients 1,8,32] [--requests 64] [--parallel 1] [--threads 1] [--samples 4] [--soak 600]
                                [--model e2e-discrete] [--sampler '{"name": "analytic", "steps": 100, "temperature": 0.5}']
    python3 bench/serve_load.py --defaults [--clients 1,8,32] [--requests 96]
        one server with every setting at its default (queue, batch, parallel, threads): refused requests (503) counted
        apart, p50/p95/p99 latency and requests/s per level, each level followed by its share of the `rudder
        generate` runs one after another (also at default threads), so the two are interleaved

Run from the repository root after `make` (make bench-serve). Bounded in count and time.
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


def recipe(args):
    return {"model": args.model, "sampler": json.loads(args.sampler), "samples": args.samples,
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


def metric(port, name):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    c.request("GET", "/metrics")
    text = c.getresponse().read().decode()
    c.close()
    return sum(float(line.split()[-1]) for line in text.splitlines() if line.startswith(name + " ") or line.startswith(name + "{"))


def start_server(args, batch, queue):
    server = subprocess.Popen([RUDDER, "serve", "--port", "0", "--threads", str(args.threads), "--parallel", str(args.parallel),
                               "--queue", str(queue), "--batch", str(batch)], stderr=subprocess.PIPE, text=True)
    line = server.stderr.readline()
    if "127.0.0.1:" not in line:
        raise SystemExit("rudder serve did not start: " + line + server.stderr.read())
    threading.Thread(target=server.stderr.read, daemon=True).start()
    return server, int(line.split("127.0.0.1:")[1].split()[0])


def load(port, clients, requests, body, until=None, refusals=None):
    latencies, failures, lock = [], [], threading.Lock()
    remaining = [requests]

    def client():
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
        while True:
            with lock:
                if remaining[0] == 0 or (until is not None and time.monotonic() > until):
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
                r = f"{type(e).__name__}: {e}"
            with lock:
                (latencies if ok else failures).append(time.perf_counter() - start if ok else str(getattr(r, "status", r)))
                if refusals is not None and not ok and getattr(r, "status", None) == 503:
                    refusals[0] += 1
        c.close()

    start = time.perf_counter()
    threads = [threading.Thread(target=client) for _ in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return time.perf_counter() - start, latencies, failures


def cli_runs(args, count, threads):
    """Seconds for `count` requests run by `rudder generate`, one process each, one after another."""
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(recipe(args), f)
    start = time.perf_counter()
    for i in range(count):
        command = [RUDDER, "generate", "-q", "--seed", str(i), f.name] + (["--threads", str(threads)] if threads else [])
        subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
    seconds = time.perf_counter() - start
    os.unlink(f.name)
    return seconds


def defaults(args):
    """Every server setting at its default: no 503 is the point, latency and throughput against the CLI beside it."""
    body = json.dumps({"recipe": recipe(args)})
    levels = [int(c) for c in args.clients.split(",")]
    server = subprocess.Popen([RUDDER, "serve", "--port", "0"], stderr=subprocess.PIPE, text=True)
    line = server.stderr.readline()
    if "127.0.0.1:" not in line:
        raise SystemExit("rudder serve did not start: " + line + server.stderr.read())
    threading.Thread(target=server.stderr.read, daemon=True).start()
    port = int(line.split("127.0.0.1:")[1].split()[0])
    print(f"rudder serve with its default settings; {args.samples} samples per request ({args.model}, sampler "
          f"{args.sampler}, length + span); {args.requests} requests per level")
    print("| clients | requests | refused (503) | other failures | requests/s | p50 s | p95 s | p99 s | requests per run |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    cli_seconds, cli_count, per_level = 0.0, 0, max(1, args.sequential // len(levels))
    try:
        for clients in levels:
            runs_before = metric(port, "rudder_runs_total")
            refused = [0]
            seconds, latencies, failures = load(port, clients, args.requests, body, refusals=refused)
            runs = metric(port, "rudder_runs_total") - runs_before
            ok = len(latencies)
            print(f"| {clients} | {args.requests} | {refused[0]} | {len(failures) - refused[0]} | {ok / seconds:.2f} | "
                  f"{percentile(latencies, 0.5):.3f} | {percentile(latencies, 0.95):.3f} | "
                  f"{percentile(latencies, 0.99):.3f} | {ok / max(runs, 1):.2f} |", flush=True)
            cli_seconds += cli_runs(args, per_level, 0)
            cli_count += per_level
    finally:
        server.terminate()
        server.wait(timeout=120)
    print(f"| | rudder generate, one after another (interleaved with the levels) | {cli_count} | | | "
          f"{cli_count / cli_seconds:.2f} | {cli_seconds / cli_count:.3f} | | | 1 |")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--clients", default="1,8,32")
    ap.add_argument("--requests", type=int, default=64)
    ap.add_argument("--parallel", type=int, default=1)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--samples", type=int, default=1)
    ap.add_argument("--model", default="e2e-continuous")
    ap.add_argument("--sampler", default='{"name": "ddpm", "steps": 100}', help="the recipe's sampler, JSON")
    ap.add_argument("--batch", type=int, default=32, help="--batch of the sharing server")
    ap.add_argument("--sequential", type=int, default=16, help="requests run one after another by rudder generate")
    ap.add_argument("--soak", type=float, default=0, help="seconds of load on the sharing server after the levels")
    ap.add_argument("--defaults", action="store_true", help="one server at its default settings (see above)")
    args = ap.parse_args()
    if args.defaults:
        return defaults(args)
    body = json.dumps({"recipe": recipe(args)})
    levels = [int(c) for c in args.clients.split(",")]
    servers = {b: start_server(args, b, max(levels) + 1) for b in (args.batch, 1)}
    rss_start = {b: rss_kb(p.pid) for b, (p, _) in servers.items()}
    print(f"rudder serve --parallel {args.parallel} --threads {args.threads}; {args.samples} samples per request "
          f"({args.model}, sampler {args.sampler}, length + span)")
    print("| clients | server | requests | failed | requests/s | samples/s | p50 s | p99 s | requests per run |")
    print("| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    gains, failure_reasons = [], {}
    try:
        for k, clients in enumerate(levels):
            rate = {}
            for b in ((args.batch, 1) if k % 2 == 0 else (1, args.batch)):
                port = servers[b][1]
                runs_before = metric(port, "rudder_runs_total")
                seconds, latencies, failures = load(port, clients, args.requests, body)
                runs = metric(port, "rudder_runs_total") - runs_before
                ok = len(latencies)
                for reason in failures:
                    failure_reasons[f"{clients} clients, --batch {b}: {reason}"] = failure_reasons.get(f"{clients} clients, --batch {b}: {reason}", 0) + 1
                rate[b] = ok / seconds
                print(f"| {clients} | --batch {b} | {args.requests} | {len(failures)} | {ok / seconds:.2f} | "
                      f"{ok * args.samples / seconds:.2f} | {percentile(latencies, 0.5):.3f} | {percentile(latencies, 0.99):.3f} | "
                      f"{ok / max(runs, 1):.2f} |", flush=True)
            gains.append((clients, rate[args.batch] / rate[1]))
        rss_end = {b: rss_kb(p.pid) for b, (p, _) in servers.items()}
        if args.soak > 0:
            p, port = servers[args.batch]
            print(f"soak: {max(levels)} clients on --batch {args.batch} for {args.soak:.0f} s; RSS (MB) every minute:", flush=True)
            end = time.monotonic() + args.soak
            total, fails = 0, 0
            samples = [rss_kb(p.pid) / 1024]
            while time.monotonic() < end:
                _, latencies, failures = load(port, max(levels), 10 ** 9, body, until=min(end, time.monotonic() + 60))
                total, fails = total + len(latencies), fails + len(failures)
                for reason in failures:
                    failure_reasons[f"soak: {reason}"] = failure_reasons.get(f"soak: {reason}", 0) + 1
                samples.append(rss_kb(p.pid) / 1024)
                print(f"  {samples[-1]:.1f}", flush=True)
            print(f"soak: {total} requests, {fails} failed; RSS {samples[0]:.1f} MB at the start, {samples[-1]:.1f} MB at the end")
    finally:
        for p, _ in servers.values():
            p.terminate()
            p.wait(timeout=120)
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(recipe(args), f)
    start = time.perf_counter()
    for i in range(args.sequential):
        subprocess.run([RUDDER, "generate", "-q", "--threads", str(args.threads), "--seed", str(i), f.name],
                       check=True, stdout=subprocess.DEVNULL)
    seconds = time.perf_counter() - start
    os.unlink(f.name)
    print(f"| | rudder generate, one after another | {args.sequential} | 0 | {args.sequential / seconds:.2f} | "
          f"{args.sequential * args.samples / seconds:.2f} | | | 1 |")
    if failure_reasons:
        print("failed requests: " + "; ".join(f"{reason} x{n}" for reason, n in sorted(failure_reasons.items())))
    print("batching gain (requests/s, --batch %d over --batch 1): %s" % (args.batch, ", ".join(f"{c} clients {g:.2f}x" for c, g in gains)))
    for b in servers:
        print(f"server --batch {b} RSS: {rss_start[b] / 1024:.1f} MB at the start, {rss_end[b] / 1024:.1f} MB at the end")


if __name__ == "__main__":
    sys.exit(main())
