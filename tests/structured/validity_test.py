#!/usr/bin/env python3
"""Structured output holds exactly: every sample of the regex and json_schema controllers matches its pattern
(Python's re.fullmatch) or validates against its schema (python3-jsonschema), whatever the sampler, with an
independent validator, on the bundled word-level models and on random-weight public checkpoints with real
tokenizers (GPT-2's for MDLM and SEDD, Qwen2.5's for a Dream-shaped model, BERT's for UDLM).

usage: validity_test.py RUDDER BUILD_DIR CASE     CASE: word_models | checkpoints | refusals | sweep
sweep (make structured-sweep): word_models and checkpoints with five seeds and four times the samples.
exit 77 (skipped) when python3-jsonschema, python3-torch or the tokenizer files (text.bpe.fetch_reference) are missing.
"""
import json
import pathlib
import re
import subprocess
import sys
import tempfile

RUDDER, BUILD, CASE = sys.argv[1], pathlib.Path(sys.argv[2]), sys.argv[3]


def generate(recipe, folder, name):
    path = pathlib.Path(folder) / f"{name}.json"
    path.write_text(json.dumps(recipe))
    out = subprocess.run([RUDDER, "generate", str(path), "-q", "--threads", "1"], capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"FAIL {name}: exit {out.returncode}: {out.stderr}")
    return [json.loads(line) for line in out.stdout.splitlines() if line.strip()]


def check(samples, name, valid, controller):
    bad = [s["text"] for s in samples if not valid(s["text"])]
    judged = [s["controls"][controller]["satisfied"] for s in samples]
    if bad:
        raise SystemExit(f"FAIL {name}: {len(bad)} of {len(samples)} invalid, e.g. {bad[0]!r}")
    if not all(judged):
        raise SystemExit(f"FAIL {name}: the controller's own verdict disagrees: {judged}")
    print(f"ok {name}: {len(samples)}/{len(samples)} valid, e.g. {samples[0]['text']!r}")


# Samplers that commit several positions per step in different ways, and one at a time.
DISCRETE_SAMPLERS = {
    "analytic_few_steps": {"name": "analytic", "steps": 6},
    "euler": {"name": "euler", "steps": 12},
    "confidence_blocks": {"name": "confidence", "steps": 6, "block_length": 8},
    "first_hitting": {"name": "first_hitting"},
    "remasking": {"name": "analytic", "steps": 16, "remask": {"strategy": "rescale", "eta": 0.5}},
}


def word_models(folder, seeds=(3,), samples=6):
    pattern = r"name \[ [A-Z][a-z]+( [A-Z][a-z]+)* \], eatType \[ (pub|restaurant|coffee shop) \](, area \[ (riverside|city centre) \])?"
    prose = r"[A-Z][a-z]+( [A-Z][a-z]+)? is a (pub|restaurant|coffee shop)( near [A-Z][a-z]+( [A-Z][a-z]+)*)?\."
    for model, samplers in (("e2e-discrete", DISCRETE_SAMPLERS), ("e2e-continuous", {"ddim": {"name": "ddim", "steps": 40}})):
        for label, sampler in samplers.items():
            for name, p in (("mr", pattern), ("prose", prose)):
                compiled = re.compile(p)
                for seed in seeds:
                    recipe = {"model": model, "sampler": sampler, "seed": seed, "samples": samples, "batch_size": 3,
                              "max_length": 24, "controllers": [{"plugin": "regex", "params": {"pattern": p}}]}
                    check(generate(recipe, folder, f"{model}_{label}_{name}"), f"{model} {label} {name} seed {seed}",
                          lambda t, c=compiled: c.fullmatch(t) is not None, "regex")


def continuous_rounds(folder):
    # The continuous family's final rounding committed over several rounds: a position redrawn in a later round must
    # fit the tokens committed in the earlier ones (seed 11's sample 57 did not, before the COMMIT state marked them).
    pattern = r"[A-Z][a-z]+( [a-z]+| [A-Z][a-z]+)* (cheap|moderate|high) prices?\."
    compiled = re.compile(pattern)
    recipe = {"model": "e2e-continuous", "sampler": {"name": "ddim", "steps": 100}, "seed": 11, "samples": 64,
              "max_length": 32, "controllers": [{"plugin": "regex", "params": {"pattern": pattern}}]}
    check(generate(recipe, folder, "continuous_rounds"), "e2e-continuous rounding in rounds",
          lambda t: compiled.fullmatch(t) is not None, "regex")


def isolated(folder):
    # The controller in a process of its own: the pieces come through the isolation protocol; the same samples.
    pattern = r"[A-Z][a-z]+( [A-Z][a-z]+)? is a (pub|restaurant|coffee shop)( near [A-Z][a-z]+( [A-Z][a-z]+)*)?\."
    compiled = re.compile(pattern)
    recipe = {"model": "e2e-discrete", "sampler": DISCRETE_SAMPLERS["confidence_blocks"], "seed": 4, "samples": 6,
              "batch_size": 3, "max_length": 24, "controllers": [{"plugin": "regex", "params": {"pattern": pattern}}]}
    same = generate(recipe, folder, "in_process")
    apart = generate(dict(recipe, isolation="process"), folder, "isolated")
    check(apart, "e2e-discrete isolated", lambda t: compiled.fullmatch(t) is not None, "regex")
    if [s["text"] for s in apart] != [s["text"] for s in same]:
        raise SystemExit("FAIL isolated: the samples differ from in-process ones")


def refusals(folder):
    # A schema the word vocabulary cannot spell (no '{' or '"'), and a pattern longer than the sequence: errors before
    # sampling, at the controller's params.
    for name, controller, words in (
            ("unspellable", {"plugin": "json_schema", "params": {"schema": {"type": "object"}}}, "cannot spell"),
            ("too_long", {"plugin": "regex", "params": {"pattern": "(the ){30}the"}}, "takes more than 24 tokens")):
        refused(folder, name, {"model": "e2e-discrete", "max_length": 24, "controllers": [controller]}, [words])
    budgets(folder)


def refused(folder, name, recipe, words, absent=()):
    path = pathlib.Path(folder) / f"{name}.json"
    path.write_text(json.dumps(recipe))
    out = subprocess.run([RUDDER, "validate", str(path)], capture_output=True, text=True, timeout=120)
    if out.returncode != 2 or "/controllers/0/params" not in out.stderr or not all(w in out.stderr for w in words) \
            or any(w in out.stderr for w in absent):
        raise SystemExit(f"FAIL {name}: exit {out.returncode}: {out.stderr}")
    print(f"ok {name}: refused before sampling: {out.stderr.strip().splitlines()[-1][:300]}")


def budgets(folder):
    # Issue 64: the compile budgets. A 300-byte schema (a string of maxLength 5000, a number within +-1e300) read
    # token by token over 100 positions: its table refused at the limit before it is built (here 8 MiB, as e2e-mdlm's
    # 4,097 tokens take 8 MiB by position 15; GPT-2's vocabulary wanted 4.65 GB at the default limits before); and
    # stopped by compile_seconds.
    wide = {"type": "object", "properties": {"s": {"type": "string", "maxLength": 5000},
                                             "n": {"type": "number", "minimum": -1e300, "maximum": 1e300}}}
    for name, params, words in (
            ("table_bytes", {"schema": wide, "max_table_bytes": 8 << 20},
             ["over 100 positions needs more than 8.0 MiB", "max_table_bytes"]),
            ("compile_seconds", {"schema": wide, "compile_seconds": 0.001}, ["compile_seconds (0.001 s) passed"])):
        recipe = {"model": "e2e-mdlm", "max_length": 100, "controllers": [{"plugin": "json_schema", "params": params}]}
        refused(folder, name, recipe, words)
    # An anyOf of 2,000 one-property objects: closed ones compile (it took 54 s, then a refusal blaming $ref
    # recursion); open ones (each allows the others' names) are refused quickly for what multiplies them.
    def many(closed):
        branches = [dict({"type": "object", "properties": {f"k{i}": {"type": "integer"}}, "required": [f"k{i}"]},
                         **({"additionalProperties": False} if closed else {})) for i in range(2000)]
        return {"model": "e2e-mdlm", "max_length": 16,
                "controllers": [{"plugin": "json_schema", "params": {"schema": {"anyOf": branches}}}]}
    refused(folder, "open_branches", many(False), ["2001 object schemas apply", "2000 property names"], ["recursion"])
    path = pathlib.Path(folder) / "closed_branches.json"
    path.write_text(json.dumps(many(True)))
    out = subprocess.run([RUDDER, "validate", str(path)], capture_output=True, text=True, timeout=120)
    if out.returncode != 0:
        raise SystemExit(f"FAIL closed_branches: exit {out.returncode}: {out.stderr}")
    print("ok closed_branches: an anyOf of 2,000 closed objects compiles")


def main():
    with tempfile.TemporaryDirectory() as folder:
        if CASE == "word_models":
            word_models(folder)
            continuous_rounds(folder)
            isolated(folder)
        elif CASE == "refusals":
            refusals(folder)
        elif CASE in ("checkpoints", "sweep"):
            import checkpoints_validity  # noqa: the random-weight public checkpoints with real tokenizers
            if CASE == "sweep":
                word_models(folder, seeds=(1, 2, 3, 4, 5), samples=24)
                checkpoints_validity.run(RUDDER, BUILD, folder, generate, check, seeds=(1, 2, 3, 4, 5), samples=16)
            else:
                checkpoints_validity.run(RUDDER, BUILD, folder, generate, check)
        else:
            raise SystemExit("unknown case " + CASE)


if __name__ == "__main__":
    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
    main()
