#!/usr/bin/env python3
"""Does structured output help? The bundled models with and without a pattern, side by side (make structured-helps).

For each bundled model and pattern: SAMPLES samples unconstrained and as many with the regex controller, same seed;
reports the share that fully match the pattern (Python's re, independent of Rudder), the share of distinct texts (a
constraint that collapsed the model onto a few texts would show here), and the wall time ratio. The last pattern
runs with classifier-free guidance towards a meaning representation (cfg), whose score (the share of its values the
text realises) is the task score with and without the pattern.

usage: structured_helps.py RUDDER [SAMPLES]
"""
import json
import re
import subprocess
import sys
import tempfile
import time

RUDDER = sys.argv[1]
SAMPLES = int(sys.argv[2]) if len(sys.argv) > 2 else 64

PATTERNS = {
    # The sentence shape most E2E references open with.
    "x_is_a": r"[A-Z][a-z]+( [A-Z][a-z]+)? is a (pub|restaurant|coffee shop)( near [A-Z][a-z]+( [A-Z][a-z]+)*)?\.",
    # A meaning-representation-like record: a format the models were never trained to write.
    "record": r"name \[ [A-Z][a-z]+( [A-Z][a-z]+)* \], eatType \[ (pub|restaurant|coffee shop) \]",
    # A sentence that ends with a price range, anywhere in the length.
    "price": r"[A-Z][a-z]+( [a-z]+| [A-Z][a-z]+)* (cheap|moderate|high) prices?\.",
    # One sentence without a comma, written for a meaning representation (with cfg, below).
    "one_sentence": r"[A-Z][^.,]*\.",
}
CFG = {"plugin": "cfg", "params": {"condition": "name[The Eagle], eatType[pub], area[riverside]", "gamma": 2}}
MODELS = {"e2e-discrete": {"name": "analytic", "steps": 32}, "e2e-continuous": {"name": "ddim", "steps": 100}}


def run(recipe, folder):
    path = f"{folder}/recipe.json"
    with open(path, "w") as f:
        json.dump(recipe, f)
    start = time.monotonic()
    out = subprocess.run([RUDDER, "generate", path, "-q", "--threads", "1"], capture_output=True, text=True)
    elapsed = time.monotonic() - start
    if out.returncode != 0:
        raise SystemExit(f"rudder generate failed ({out.returncode}): {out.stderr}")
    return [json.loads(line) for line in out.stdout.splitlines() if line.strip()], elapsed


def main():
    print("| model | pattern | valid, free | valid, constrained | distinct, free | distinct, constrained | "
          "cfg score, free | cfg score, constrained | time ratio |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    with tempfile.TemporaryDirectory() as folder:
        for model, sampler in MODELS.items():
            for name, pattern in PATTERNS.items():
                compiled = re.compile(pattern)
                extra = [CFG] if name == "one_sentence" else []
                base = {"model": model, "sampler": sampler, "seed": 11, "samples": SAMPLES, "max_length": 32,
                        "controllers": extra}
                free, t_free = run(base, folder)
                held, t_held = run(dict(base, controllers=extra + [{"plugin": "regex", "params": {"pattern": pattern}}]),
                                   folder)
                texts = [[s["text"] for s in samples] for samples in (free, held)]
                valid = [sum(compiled.fullmatch(t) is not None for t in ts) / len(ts) for ts in texts]
                distinct = [len(set(ts)) / len(ts) for ts in texts]
                cfg = [f"{sum(s['controls']['cfg']['score'] for s in samples) / len(samples):.3f}" if extra else "-"
                       for samples in (free, held)]
                print(f"| {model} | {name} | {valid[0]:.1%} | {valid[1]:.1%} | {distinct[0]:.0%} | {distinct[1]:.0%} | "
                      f"{cfg[0]} | {cfg[1]} | {t_held / t_free:.2f} |", flush=True)
                print(f"  e.g. free: {texts[0][0]!r}; constrained: {texts[1][0]!r}", file=sys.stderr)


if __name__ == "__main__":
    main()
