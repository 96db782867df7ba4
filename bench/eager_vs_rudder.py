#!/usr/bin/env python3
"""Rudder's reverse loop against a PyTorch eager loop running the algorithm Rudder had before the lean step
(bench/eager_reference.py: same weights, same seed, token-for-token the same samples as that Rudder).

For each recipe, batch size and thread count it runs `rudder generate` and the eager reference one after the other,
alternating which goes first from round to round (the machine is shared: a side-by-side pair sees the same load),
and prints seconds per sample of each and their ratio. Both tools time generation only (not loading).

    python3 bench/eager_vs_rudder.py [--rounds 2] [--batches 1,16,64] [--threads 1,2] [--cases unconditional_discrete,...]

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
    args = ap.parse_args()
    if not os.access(RUDDER, os.X_OK):
        sys.exit(f"{RUDDER} is missing: build Rudder first (make)")
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
                    rudder_cmd = [RUDDER, "generate", rudder_recipe, "--threads", str(threads),
                                  "-o", os.path.join(work, "rudder.jsonl")]
                    times = {"eager": [], "rudder": []}
                    for r in range(args.rounds):
                        order = ["eager", "rudder"] if r % 2 == 0 else ["rudder", "eager"]
                        for tool in order:
                            if tool == "eager":
                                times[tool].append(seconds(eager_cmd, r"eager: \d+ samples in ([0-9.]+) s", env))
                            else:
                                times[tool].append(seconds(rudder_cmd, r"\d+ samples in ([0-9.]+) s", env))
                    eager_s = min(times["eager"]) / samples
                    rudder_s = min(times["rudder"]) / samples
                    rows.append((case, batch, threads, eager_s, rudder_s))
                    print(f"| {case} | {batch} | {threads} | {eager_s * 1000:.1f} | {rudder_s * 1000:.1f} | "
                          f"{eager_s / rudder_s:.2f}x |", flush=True)
    return rows


if __name__ == "__main__":
    print("| case | batch | threads | eager ms/sample | Rudder ms/sample | eager / Rudder |")
    print("| --- | --- | --- | --- | --- | --- |")
    main()
