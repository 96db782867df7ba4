#!/usr/bin/env python3
"""Samples that a change of structure must leave byte for byte as they were.

`run BUILD OUT` writes, with BUILD/bin/rudder (one compute thread, so that no reduction order depends on the load):
  - every example recipe (examples/recipes/*.json), 3 samples each;
  - each sampler and sampler option on the bundled models of both families (DDPM, DDIM and the x0 modes; euler,
    analytic, first hitting, confidence in blocks with each order, remasking, prompt guidance, top-k / top-p,
    particles in both families);
  - each public-checkpoint fixture family (random weights written by tests/nets/*_fixture.py with python3-torch:
    MDLM, SEDD, BD3-LM, UDLM, DUO, LLaDA, Dream) with the samplers each takes, under hard constraints;
each as OUT/<case>.jsonl, and the recipes it ran as OUT/recipes/<case>.json. `run BUILD OUT REGEX` runs only the
cases whose name the regular expression finds (e.g. 'authors' for the authors' samplers).
`compare A B` compares two such folders file by file (cmp) and exits 1 on any difference or missing file.

Used by issue 45 (one room per diffusion process): run it on the tree before and after, then compare.
"""
import filecmp
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent


def bundled_cases():
    """Recipes over the bundled models that the example recipes leave out: every sampler and option once."""
    d = {"model": "e2e-discrete", "seed": 3, "samples": 3, "batch_size": 3, "max_length": 24}
    c = {"model": "e2e-continuous", "seed": 3, "samples": 3, "batch_size": 3, "max_length": 24}
    span = {"plugin": "span", "params": {"prefix": "The Eagle"}}
    length = {"plugin": "length", "params": {"tokens": 12}}
    sentiment = {"plugin": "sentiment", "weight": 200.0, "params": {"polarity": "positive", "top_k": 50}}
    return {
        "discrete_euler": dict(d, sampler={"name": "euler", "steps": 50}),
        "discrete_first_hitting_blocks": dict(d, sampler={"name": "first_hitting", "block_length": 8},
                                              controllers=[span]),
        "discrete_confidence_probability": dict(d, sampler={"name": "confidence", "steps": 24, "block_length": 8}),
        "discrete_confidence_margin": dict(d, sampler={"name": "confidence", "steps": 12, "order": "margin"}),
        "discrete_confidence_entropy": dict(d, sampler={"name": "confidence", "steps": 6, "block_length": 12,
                                                        "order": "entropy", "temperature": 0.7}),
        "discrete_remask_rescale": dict(d, sampler={"name": "analytic", "steps": 40, "remask": {
            "strategy": "rescale", "eta": 0.5, "from_t": 0.9, "to_t": 0.1}}, controllers=[length]),
        "discrete_prompt_guidance": dict(d, sampler={"name": "analytic", "steps": 40, "prompt_guidance": 1.5},
                                         controllers=[span]),
        "discrete_top_k_top_p": dict(d, sampler={"name": "analytic", "steps": 40, "top_k": 5, "top_p": 0.8}),
        "discrete_no_cache": dict(d, sampler={"name": "analytic", "steps": 30, "cache": False}),
        "discrete_particles": dict(d, sampler={"name": "analytic", "steps": 40, "temperature": 0.5},
                                   guidance={"particles": 2}, controllers=[sentiment]),
        "discrete_wide_recommended": dict(d, model="e2e-discrete-wide", sampler={"steps": 40}),
        "continuous_ddpm": dict(c, sampler={"name": "ddpm", "steps": 40}),
        "continuous_ddim_eta": dict(c, sampler={"name": "ddim", "steps": 40, "eta": 0.5, "x0": "model"}),
        "continuous_clamp": dict(c, sampler={"name": "ddim", "steps": 40, "x0": "clamp", "noise_scale": 0.5}),
        "continuous_clamp_below": dict(c, sampler={"name": "ddpm", "steps": 40, "clamp_below_t": 0.3,
                                                   "temperature": 0.8}),
        "continuous_particles": dict(c, sampler={"name": "ddim", "steps": 40},
                                     guidance={"particles": 2, "resample_every": 10}, controllers=[sentiment]),
        "continuous_infill": dict(c, sampler={"name": "ddim", "steps": 40}, controllers=[span, length]),
        "cdcd_recommended": dict(c, model="e2e-cdcd", sampler={"steps": 40}),
    }


def fixture_cases(fixtures):
    """Recipes over the random-weight public checkpoints, with a prompt, a length and a banned word."""
    dit, llm = fixtures / "dit", fixtures / "llm"
    hard = [{"plugin": "span", "params": {"prefix": "cat sat"}}, {"plugin": "length", "params": {"tokens": 10}},
            {"plugin": "exclude_words", "params": {"words": ["the"]}}]
    base = {"seed": 11, "samples": 3, "batch_size": 3, "max_length": 16, "controllers": hard}
    cases = {}
    for name in ("mdlm", "sedd"):
        for sampler in ({"name": "analytic", "steps": 16}, {"name": "euler", "steps": 16},
                        {"name": "first_hitting"}, {"name": "confidence", "steps": 8, "block_length": 4},
                        {"name": "analytic", "steps": 16, "remask": {"strategy": "cap", "eta": 0.1}},
                        {"name": "analytic", "steps": 16, "prompt_guidance": 1.0}):
            tag = sampler["name"] + ("_remask" if "remask" in sampler else "") + \
                ("_prompt_guidance" if "prompt_guidance" in sampler else "")
            cases[f"{name}_{tag}"] = dict(base, model=str(dit / name), sampler=sampler)
    cases["bd3lm_first_hitting"] = dict(base, model=str(dit / "bd3lm"), sampler={"name": "first_hitting",
                                                                                 "block_length": 4})
    cases["bd3lm_confidence"] = dict(base, model=str(dit / "bd3lm"), sampler={"name": "confidence", "steps": 8,
                                                                              "block_length": 2})
    for name in ("udlm", "duo"):
        for sampler in ("analytic", "euler"):
            cases[f"{name}_{sampler}"] = dict(base, model=str(dit / name),
                                              sampler={"name": sampler, "steps": 12, "top_k": 50})
    cases["udlm_recommended"] = dict(base, model=str(dit / "udlm"), sampler={"steps": 12}, controllers=hard[1:])
    for name in ("llada", "dream"):
        for order in ("probability", "margin", "entropy"):
            cases[f"{name}_confidence_{order}"] = dict(
                base, model=str(llm / name), max_length=20,
                sampler={"name": "confidence", "steps": 8, "block_length": 4, "order": order})
        cases[f"{name}_recommended"] = dict(base, model=str(llm / name), max_length=20, sampler={"steps": 8})
        cases[f"{name}_analytic_guided"] = dict(base, model=str(llm / name), max_length=20,
                                                sampler={"name": "analytic", "steps": 10, "prompt_guidance": 0.5})
    # The authors' samplers and Fast-dLLM's settings on them (issue 60 split the absorbing room by sampler).
    authors = {
        "llada": [{"name": "llada", "steps": 8, "block_length": 4},
                  {"name": "llada", "steps": 8, "remasking": "random", "temperature": 0.7},
                  {"name": "llada", "threshold": 0.5, "block_length": 4},
                  {"name": "llada", "factor": 1.0, "block_length": 4, "kv_cache": "prefix"},
                  {"name": "llada", "steps": 8, "block_length": 4, "kv_cache": "dual"},
                  {"name": "llada", "steps": 8, "prompt_guidance": 0.5}],
        "dream": [{"name": "dream", "steps": 8, "alg": alg, "temperature": 0.5, "top_p": 0.9}
                  for alg in ("origin", "maskgit_plus", "topk_margin", "entropy")] +
                 [{"name": "dream", "steps": 8, "alg": "topk_margin", "alg_temp": 0.5, "temperature": 0.5},
                  {"name": "dream", "steps": 16, "block_length": 4},
                  {"name": "dream", "threshold": 0.5, "block_length": 4, "kv_cache": "dual"}],
    }
    for name, samplers in authors.items():
        for k, sampler in enumerate(samplers):
            cases[f"{name}_authors_{k}"] = dict(base, model=str(llm / name), max_length=20, sampler=sampler)
    for k, sampler in enumerate(({"name": "mdlm", "steps": 16}, {"name": "mdlm", "steps": 16, "noise_removal": False,
                                                                  "top_k": 20})):
        cases[f"mdlm_authors_{k}"] = dict(base, model=str(dit / "mdlm"), sampler=sampler)
    for k, sampler in enumerate(({"name": "sedd", "steps": 16}, {"name": "sedd", "steps": 16,
                                                                  "predictor": "analytic", "temperature": 0.8})):
        cases[f"sedd_authors_{k}"] = dict(base, model=str(dit / "sedd"), sampler=sampler)
    cases["bd3lm_authors"] = dict(base, model=str(dit / "bd3lm"), sampler={"name": "bd3lm", "top_p": 0.9})
    return cases


def make_fixtures(out):
    """The fixture scripts' checkpoints, each given the tokenizer the checkpoint tests give it."""
    dit, llm = out / "dit", out / "llm"
    for script, folder in (("dit_checkpoint_fixture.py", dit), ("bidirectional_llm_fixture.py", llm)):
        # Debian's python3, which has python3-torch (the one on PATH may be another).
        python = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable
        subprocess.run([python, str(ROOT / "tests" / "nets" / script), str(folder)], check=True,
                       stdout=subprocess.DEVNULL)
    for name in ("mdlm", "sedd", "bd3lm", "duo"):
        for file in ("vocab.json", "merges.txt"):
            shutil.copy(dit / "gpt2_like_tokenizer" / file, dit / name / file)
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", ".", ",", "the", "cat", "sat", "near", "river", "on", "mat",
             "##ed", "##ing"]
    vocab += [chr(c) for c in range(ord("a"), ord("z") + 1)] + ["##" + chr(c) for c in range(ord("a"), ord("z") + 1)]
    vocab += [f"w{i}" for i in range(300 - len(vocab))]
    (dit / "udlm" / "vocab.txt").write_text("".join(t + "\n" for t in vocab))


def run(build, out, only=None):
    rudder = pathlib.Path(build).resolve() / "bin" / "rudder"
    out = pathlib.Path(out).resolve()
    if out.exists():
        shutil.rmtree(out)
    (out / "recipes").mkdir(parents=True)
    fixtures = out / "fixtures"
    make_fixtures(fixtures)
    cases = {}
    for recipe in sorted((ROOT / "examples" / "recipes").glob("*.json")):
        if not only or re.search(only, "example_" + recipe.stem):
            cases["example_" + recipe.stem] = recipe
    for name, recipe in {**bundled_cases(), **fixture_cases(fixtures)}.items():
        if only and not re.search(only, name):
            continue
        path = out / "recipes" / f"{name}.json"
        path.write_text(json.dumps(recipe, indent=1) + "\n")
        cases[name] = path
    env = dict(os.environ, RUDDER_CACHE_DIR="")
    failed = 0
    for i, (name, recipe) in enumerate(cases.items()):
        print(f"[{i + 1}/{len(cases)}] {name}", flush=True)
        result = subprocess.run([str(rudder), "generate", str(recipe), "--threads", "1", "-n", "3", "-q",
                                 "-o", str(out / f"{name}.jsonl")], env=env, stderr=subprocess.PIPE, text=True)
        if result.returncode != 0:
            # A case that fails must fail the same way on both trees: its message is what is compared.
            (out / f"{name}.jsonl").write_text("exit " + str(result.returncode) + "\n" +
                                               result.stderr.replace(str(out), "<out>"))
            failed += 1
    shutil.rmtree(fixtures)
    print(f"{len(cases)} cases, {failed} failed (their messages kept for the comparison) -> {out}")


def compare(a, b):
    a, b = pathlib.Path(a), pathlib.Path(b)
    names = sorted({p.name for p in a.glob("*.jsonl")} | {p.name for p in b.glob("*.jsonl")})
    different = [n for n in names if not (a / n).exists() or not (b / n).exists()
                 or not filecmp.cmp(a / n, b / n, shallow=False)]
    for n in different:
        print("differs:", n)
    print(f"{len(names) - len(different)} of {len(names)} byte-identical")
    return 1 if different or not names else 0


if __name__ == "__main__":
    if len(sys.argv) in (4, 5) and sys.argv[1] == "run":
        run(sys.argv[2], sys.argv[3], sys.argv[4] if len(sys.argv) == 5 else None)
    elif len(sys.argv) == 4 and sys.argv[1] == "compare":
        sys.exit(compare(sys.argv[2], sys.argv[3]))
    else:
        sys.exit(__doc__)
