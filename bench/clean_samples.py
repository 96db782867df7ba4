#!/usr/bin/env python3
"""How clean the demo's and the README's samples are: for each recipe, N samples (one `rudder generate` run, seeded),
the share with a doubled punctuation mark ("city..", "5,.") or an immediately repeated word ("of of", "rating
rating"), their perplexity under the teacher and their distinct bigrams (`rudder score`). Each recipe is measured as
it was at --before (a git revision: the recipes before issue 49's fix by default) and as shipped now, the two runs
interleaved recipe by recipe; --without adds the shipped recipe with its `no_repeats` controller taken out.

    python3 bench/clean_samples.py [--samples 500] [--seed 1] [--recipes NAME,...] [--before REV] [--without]
                                   [--json OUT]

Run from the repository root after `make` (make bench-clean-samples). Prints a Markdown table.
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
RECIPES = {
    "length_span_discrete": "examples/recipes/length_span_discrete.json",
    "length_span_continuous": "examples/recipes/length_span_continuous.json",
    "infill_discrete": "examples/recipes/infill_discrete.json",
    "sentiment_discrete": "examples/recipes/sentiment_discrete.json",
    "readme": "README.md",  # the recipe in the README's "A recipe:" block
}
DOUBLED_PUNCTUATION = re.compile(r"[.,!?;:]\s*[.,!?;:]")
REPEATED_WORD = re.compile(r"\b(\w+)\s+\1\b", re.IGNORECASE)


def read(path, revision):
    """A file of the repository, as it is now (revision None) or at a git revision."""
    if revision is None:
        with open(os.path.join(ROOT, path), encoding="utf-8") as f:
            return f.read()
    return subprocess.run(["git", "show", f"{revision}:{path}"], cwd=ROOT, check=True, capture_output=True,
                          text=True).stdout


def load(name, revision=None):
    text = read(RECIPES[name], revision)
    if name == "readme":  # the recipe in the README's "A recipe:" block
        text = text.split("A recipe:", 1)[1].split("```json", 1)[1].split("```", 1)[0]
    return json.loads(text)


def without_control(recipe):
    out = dict(recipe)
    out["controllers"] = [c for c in recipe.get("controllers", []) if c.get("plugin") != "no_repeats"]
    return out


def measure(recipe, samples, seed, folder, tag):
    path = os.path.join(folder, tag + ".json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump(recipe, f)
    out = os.path.join(folder, tag + ".jsonl")
    subprocess.run([RUDDER, "generate", "-q", "-n", str(samples), "--seed", str(seed), path, "-o", out], check=True,
                   cwd=ROOT)
    texts = [json.loads(line)["text"] for line in open(out, encoding="utf-8")]
    doubled = sum(1 for t in texts if DOUBLED_PUNCTUATION.search(t))
    repeated = sum(1 for t in texts if REPEATED_WORD.search(t))
    either = sum(1 for t in texts if DOUBLED_PUNCTUATION.search(t) or REPEATED_WORD.search(t))
    scored = subprocess.run([RUDDER, "score", "--json", out], check=True, capture_output=True, text=True, cwd=ROOT)
    score = json.loads(scored.stdout)
    unmet = {}
    for line in open(out, encoding="utf-8"):
        for label, verdict in json.loads(line).get("controls", {}).items():
            if verdict.get("satisfied") is False:
                unmet[label] = unmet.get(label, 0) + 1
    examples = [t for t in texts if DOUBLED_PUNCTUATION.search(t) or REPEATED_WORD.search(t)][:3]
    return {"samples": len(texts), "doubled_punctuation": doubled, "repeated_word": repeated, "either": either,
            "rate": either / max(1, len(texts)), "perplexity": score["perplexity"], "distinct_2": score["distinct_2"],
            "unmet": unmet, "examples": examples}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--samples", type=int, default=500)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--recipes", default=",".join(RECIPES))
    ap.add_argument("--before", default="cc071fe", help="the git revision whose recipes are the baseline")
    ap.add_argument("--without", action="store_true", help="also the shipped recipe without no_repeats")
    ap.add_argument("--json", help="write every number here too")
    args = ap.parse_args()
    results = {}
    print(f"{args.samples} samples a recipe, seed {args.seed}")
    print("| recipe | as | doubled punctuation | repeated word | either | teacher perplexity | distinct-2 | "
          "constraints unmet |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: | --- |")
    with tempfile.TemporaryDirectory() as folder:
        for name in args.recipes.split(","):
            shipped = load(name)
            variants = [(f"before ({args.before})", load(name, args.before)), ("shipped", shipped)]
            if args.without:
                variants.append(("shipped without no_repeats", without_control(shipped)))
            for label, recipe in variants:
                r = measure(recipe, args.samples, args.seed, folder, f"{name}-{len(results)}")
                results[f"{name}: {label}"] = r
                unmet = ", ".join(f"{k} {v}" for k, v in sorted(r["unmet"].items())) or "none"
                print(f"| {name} | {label} | {r['doubled_punctuation']} | {r['repeated_word']} | "
                      f"{r['either']} ({100 * r['rate']:.1f}%) | {r['perplexity']:.2f} | {r['distinct_2']:.3f} | "
                      f"{unmet} |", flush=True)
    for key, r in results.items():
        if r["examples"]:
            print(f"{key}: e.g. " + " | ".join(r["examples"]))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    sys.exit(main())
