#!/usr/bin/env python3
"""Rudder's reverse loop against a PyTorch eager loop running the algorithm Rudder had before the lean step
(bench/eager_reference.py: same weights, same seed, token-for-token the same samples as that Rudder).

For each recipe, batch size and thread count it runs `rudder generate` and the eager reference one after the other,
alternating which goes first from round to round (the machine is shared: a side-by-side pair sees the same load),
and prints seconds per sample of each and their ratio. Both tools time generation only (not loading).

    python3 bench/eager_vs_rudder.py [--rounds 2] [--batches 1,16,64] [--threads 1,2] [--cases unconditional_discrete,...]

With `--rudder A --rudder B` (two builds' bin/rudder, e.g. the tree before a change and after), each round runs the
eager loop and both, in an order that rotates from round to round, and prints each against the eager loop and B
against A: a change's effect on the step, measured side by side.

Run from the repository root after `make` (make bench-eager). Needs Debian's python3-torch (/usr/bin/python3).
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RUDDER = os.path.join(ROOT, "build", "bin", "rudder")
EAGER = os.path.join(ROOT, "bench", "eager_reference.py")
SYSTEM_PYTHON = "/usr/bin/python3"  # Debian's, with python3-torch (the same LibTorch as Rudder)

# name: (the recipe both run: today's algorithm, and the sampler settings Rudder runs it with now)
CASES = {
    "unconditional_discrete": ({"model": "e2e-discrete", "sampler": {"name": "analytic", "steps": 200, "temperature": 0.5}},
                               None),
    "unconditional_discrete_first_hitting": (
        {"model": "e2e-discrete", "sampler": {"name": "analytic", "steps": 200, "temperature": 0.5}},
        {"name": "first_hitting", "temperature": 0.5}),
    "unconditional_continuous": ({"model": "e2e-continuous",
                                  "sampler": {"name": "ddpm", "steps": 200, "x0": "clamp", "noise_scale": 0.8}}, None),
    "length_span_discrete": ({"model": "e2e-discrete", "sampler": {"name": "analytic", "steps": 200, "temperature": 0.5},
                              "controllers": [{"plugin": "length", "params": {"tokens": 16}},
                                              {"plugin": "span", "params": {"prefix": "The Eagle"}}]}, None),
    "length_span_discrete_first_hitting": (
        {"model": "e2e-discrete", "sampler": {"name": "analytic", "steps": 200, "temperature": 0.5},
         "controllers": [{"plugin": "length", "params": {"tokens": 16}},
                         {"plugin": "span", "params": {"prefix": "The Eagle"}}]},
        {"name": "first_hitting", "temperature": 0.5}),
    "length_span_continuous": ({"model": "e2e-continuous", "sampler": {"name": "ddpm", "steps": 200, "x0": "clamp"},
                                "controllers": [{"plugin": "length", "params": {"tokens": 16}},
                                                {"plugin": "span", "params": {"prefix": "The Eagle"}}]}, None),
    # The continuous family has no exact sampler that skips network calls: Rudder takes 66 respaced DDPM steps where
    # the eager loop takes 200 (teacher perplexity and distinct-2 within 7% of 200 steps, docs/results.md).
    "unconditional_continuous_66_steps": (
        {"model": "e2e-continuous", "sampler": {"name": "ddpm", "steps": 200, "x0": "clamp", "noise_scale": 0.8}},
        {"name": "ddpm", "steps": 66, "x0": "clamp", "noise_scale": 0.8}),
    "length_span_continuous_66_steps": (
        {"model": "e2e-continuous", "sampler": {"name": "ddpm", "steps": 200, "x0": "clamp"},
         "controllers": [{"plugin": "length", "params": {"tokens": 16}},
                         {"plugin": "span", "params": {"prefix": "The Eagle"}}]},
        {"name": "ddpm", "steps": 66, "x0": "clamp"}),
}


def seconds(cmd, pattern, env):
    out = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if out.returncode != 0:
        sys.exit(f"failed ({out.returncode}): {' '.join(cmd)}\n{out.stderr[-2000:]}")
    m = re.search(pattern, out.stdout + out.stderr)
    if not m:
        sys.exit(f"no time in the output of {' '.join(cmd)}:\n{out.stderr[-2000:]}")
    return float(m.group(1))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--batches", default="1,16,64")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--cases", default=",".join(CASES))
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--rudder", action="append", help="a rudder binary (repeatable; default build/bin/rudder)")
    args = ap.parse_args()
    rudders = args.rudder or [RUDDER]
    for binary in rudders:
        if not os.access(binary, os.X_OK):
            sys.exit(f"{binary} is missing: build Rudder first (make)")
    if subprocess.run([SYSTEM_PYTHON, "-c", "import torch"], capture_output=True).returncode != 0:
        sys.exit(f"{SYSTEM_PYTHON} cannot import torch: install Debian's python3-torch (apt-get install python3-torch)")
    cases = args.cases.split(",")
    for c in cases:
        if c not in CASES:
            sys.exit(f"unknown case '{c}'; the cases are {', '.join(CASES)}")
    env = dict(os.environ, OMP_NUM_THREADS="1")
    rows = []
    with tempfile.TemporaryDirectory() as work:
        for case in cases:
            recipe, rudder_sampler = CASES[case]
            for batch in map(int, args.batches.split(",")):
                samples = max(16, batch)  # batch 1 runs 16 batches: enough steps to time
                for threads in map(int, args.threads.split(",")):
                    base = dict(recipe, seed=args.seed, samples=samples, batch_size=batch)
                    eager_recipe = os.path.join(work, "eager.json")
                    rudder_recipe = os.path.join(work, "rudder.json")
                    json.dump(base, open(eager_recipe, "w"))
                    json.dump(dict(base, sampler=rudder_sampler) if rudder_sampler else base, open(rudder_recipe, "w"))
                    eager_cmd = [SYSTEM_PYTHON, EAGER, "--recipe", eager_recipe, "--threads", str(threads),
                                 "-o", os.path.join(work, "eager.jsonl")]
                    tools = {"eager": (eager_cmd, r"eager: \d+ samples in ([0-9.]+) s")}
                    for k, binary in enumerate(rudders):
                        tools[f"rudder{k}"] = ([binary, "generate", rudder_recipe, "--threads", str(threads),
                                                "-o", os.path.join(work, "rudder.jsonl")], r"\d+ samples in ([0-9.]+) s")
                    names = list(tools)
                    times = {name: [] for name in names}
                    for r in range(args.rounds):
                        for name in names[r % len(names):] + names[:r % len(names)]:
                            times[name].append(seconds(*tools[name], env))
                    per_sample = {name: min(times[name]) / samples for name in names}
                    rows.append((case, batch, threads, per_sample))
                    eager_s = per_sample["eager"]
                    cells = [f"{per_sample[f'rudder{k}'] * 1000:.1f} ({eager_s / per_sample[f'rudder{k}']:.2f}x)"
                             for k in range(len(rudders))]
                    last = (f" | {per_sample['rudder0'] / per_sample[f'rudder{len(rudders) - 1}']:.3f}"
                            if len(rudders) > 1 else "")
                    print(f"| {case} | {batch} | {threads} | {eager_s * 1000:.1f} | " + " | ".join(cells) + last + " |",
                          flush=True)
    return rows


if __name__ == "__main__":
    n = max(1, sys.argv.count("--rudder"))
    rudder_cells = " | ".join(f"Rudder {chr(65 + k)} ms/sample (eager / it)" for k in range(n))
    print("| case | batch | threads | eager ms/sample | " + rudder_cells + (" | A / B |" if n > 1 else " |"))
    print("| --- " * (4 + n + (1 if n > 1 else 0)) + "|")
    main()
