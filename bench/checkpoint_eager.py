#!/usr/bin/python3
"""A public checkpoint's network in Rudder against the same network in PyTorch eager, side by side: MDLM's DiT at
mdlm-owt's size (hidden 768, 12 blocks, 12 heads, vocabulary 50,258; random weights written by
tests/nets/dit_checkpoint_fixture.py --real-size), batch 1, every position masked, one thread each; the forward of
a reverse step (the network and the clean-token log-probabilities) at each length, the load, resident memory after
the load and at the peak. Each measurement is a process of its own; Rudder's and eager's alternate, round by round.

    /usr/bin/python3 bench/checkpoint_eager.py [--dir DIR] [--positions 128,1024] [--rounds 3] [--repeats 2]

The eager side loads the weights as a PyTorch user does (the file's tensors copied into the model's parameters,
as load_state_dict does); Rudder maps the file and uses its float32 tensors in place, and is run a second time with
RUDDER_MAP_WEIGHTS=0 (the file read into the process). Then the same weights as BD3-LM checkpoints (blocks of 4
and 16): a call of the denoiser with its key/value cache of finished blocks against one that recomputes the
sequence (rudder_bd3lm_cache_bench). Needs /usr/bin/python3 with python3-torch (the LibTorch Rudder links).
"""
import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def status_mb(field):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return float(line.split()[1]) / 1024
    return -1.0


def eager_child(folder, positions, repeats):
    import torch
    import torch.nn.functional as F
    torch.set_num_threads(1)
    config = json.load(open(os.path.join(folder, "config.json")))
    start = time.perf_counter()
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from eager_reference import load_safetensors  # the file's tensors copied out, as load_state_dict leaves them
    w = load_safetensors(os.path.join(folder, "model.safetensors"))
    out = {"positions": positions, "threads": torch.get_num_threads(), "load_s": time.perf_counter() - start,
           "rss_after_load_mb": {"anon": status_mb("RssAnon"), "file": status_mb("RssFile")}, "forward_s": []}
    p, heads, vocab = "backbone.", config["n_heads"], config["vocab_size"]
    hidden = config["hidden_dim"]
    d = hidden // heads
    mask = vocab - 1

    def modulate(x, shift, scale):
        return x * (1 + scale[:, None]) + shift[:, None]

    def norm(x, weight):
        return F.layer_norm(x, (hidden,)) * weight

    with torch.inference_mode():
        tokens = torch.full((1, positions), mask, dtype=torch.long)
        for _ in range(repeats):
            start = time.perf_counter()
            sigma = torch.zeros(1)  # mdlm-owt is not time-conditioned: its backbone sees sigma = 0
            freqs = torch.exp(-math.log(10000) * torch.arange(128) / 128)
            args = sigma[:, None] * freqs[None]
            c = torch.cat([torch.cos(args), torch.sin(args)], -1)
            c = F.silu(F.linear(F.silu(F.linear(c, w[p + "sigma_map.mlp.0.weight"], w[p + "sigma_map.mlp.0.bias"])),
                                w[p + "sigma_map.mlp.2.weight"], w[p + "sigma_map.mlp.2.bias"]))
            inv = 10000.0 ** (-torch.arange(0, d, 2).float() / d)
            ang = torch.outer(torch.arange(positions).float(), inv)
            cos, sin = torch.cat([ang, ang], -1).cos()[:, None], torch.cat([ang, ang], -1).sin()[:, None]

            def rope(t):
                return t * cos + torch.cat([-t[..., d // 2:], t[..., : d // 2]], -1) * sin

            x = w[p + "vocab_embed.embedding"][tokens]
            for i in range(config["n_blocks"]):
                b = f"{p}blocks.{i}."
                mod = F.linear(c, w[b + "adaLN_modulation.weight"], w[b + "adaLN_modulation.bias"]).chunk(6, 1)
                h = modulate(norm(x, w[b + "norm1.weight"]), mod[0], mod[1])
                q, k, v = F.linear(h, w[b + "attn_qkv.weight"]).view(1, positions, 3, heads, d).unbind(2)
                q, k, v = rope(q).transpose(1, 2), rope(k).transpose(1, 2), v.transpose(1, 2)
                att = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(d), -1) @ v
                x = x + mod[2][:, None] * F.linear(att.transpose(1, 2).reshape(1, positions, hidden), w[b + "attn_out.weight"])
                h = modulate(norm(x, w[b + "norm2.weight"]), mod[3], mod[4])
                x = x + mod[5][:, None] * F.linear(F.gelu(F.linear(h, w[b + "mlp.0.weight"], w[b + "mlp.0.bias"]),
                                                          approximate="tanh"), w[b + "mlp.2.weight"], w[b + "mlp.2.bias"])
            mod = F.linear(c, w[p + "output_layer.adaLN_modulation.weight"], w[p + "output_layer.adaLN_modulation.bias"]).chunk(2, 1)
            logits = F.linear(modulate(norm(x, w[p + "output_layer.norm_final.weight"]), mod[0], mod[1]),
                              w[p + "output_layer.linear.weight"], w[p + "output_layer.linear.bias"])
            logits[..., mask] = -math.inf  # SUBS: every position is masked, so the log-softmax without the mask
            logp = logits.log_softmax(-1)
            logp[..., mask] = -1e4
            out["forward_s"].append(time.perf_counter() - start)
            out["checksum"] = logp[:, :min(8, positions), :1000].sum().item()
    out["rss_after_forward_mb"] = {"anon": status_mb("RssAnon"), "file": status_mb("RssFile")}
    out["peak_rss_mb"] = status_mb("VmHWM")
    print(json.dumps(out))


def run(command, extra_env):
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", **extra_env)
    done = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    if done.returncode != 0:
        sys.exit(f"checkpoint_eager: {' '.join(command)} failed ({done.returncode}): {done.stderr.strip()}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--child-eager":
        eager_child(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
        return
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", default="/tmp/rudder-mdlm-owt-shaped", help="an MDLM checkpoint (written there if missing)")
    ap.add_argument("--positions", default="128,1024")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--repeats", type=int, default=2, help="forwards per process; the first is reported apart")
    ap.add_argument("--bench", default=os.path.join(REPO, "build", "bin", "rudder_checkpoint_bench"))
    ap.add_argument("--bd3lm-bench", default=None, help="rudder_bd3lm_cache_bench (default: beside --bench)")
    ap.add_argument("--bd3lm-calls", type=int, default=16, help="network calls per BD3-LM measurement")
    args = ap.parse_args()
    if not os.path.exists(os.path.join(args.dir, "reference.safetensors")):
        print(f"writing an mdlm-owt-shaped checkpoint into {args.dir} ...", file=sys.stderr, flush=True)
        subprocess.run([sys.executable, os.path.join(REPO, "tests", "nets", "dit_checkpoint_fixture.py"), "--real-size",
                        args.dir], check=True)
    file_mb = os.path.getsize(os.path.join(args.dir, "model.safetensors")) / 2 ** 20
    rows = {}
    for r in range(args.rounds):
        for positions in [int(x) for x in args.positions.split(",")]:
            sides = [("rudder", [args.bench, args.dir, str(positions), str(args.repeats)], {}),
                     ("rudder, copied", [args.bench, args.dir, str(positions), str(args.repeats)], {"RUDDER_MAP_WEIGHTS": "0"}),
                     ("eager", [sys.executable, os.path.abspath(__file__), "--child-eager", args.dir, str(positions),
                                str(args.repeats)], {})]
            for side, command, env in (sides if r % 2 == 0 else sides[::-1]):
                result = run(command, env)
                rows.setdefault((positions, side), []).append(result)
                print(f"round {r + 1}, L = {positions}, {side}: forward {', '.join(f'{s:.3f}' for s in result['forward_s'])} s, "
                      f"load {result['load_s']:.2f} s, checksum {result['checksum']:.6g}", file=sys.stderr, flush=True)
    print(f"file: {file_mb:.0f} MB (float32)")
    print("| L | side | forward s (median of the later forwards) | load s | RSS after load MB (anon + file) | "
          "RSS after the forwards MB (anon + file) | peak RSS MB |")
    print("| ---: | --- | ---: | ---: | ---: | ---: | ---: |")
    for (positions, side), results in sorted(rows.items()):
        later = [s for res in results for s in res["forward_s"][1:]] or [s for res in results for s in res["forward_s"]]
        after, end = results[-1]["rss_after_load_mb"], results[-1]["rss_after_forward_mb"]
        print(f"| {positions} | {side} | {statistics.median(later):.3f} | {statistics.median(r['load_s'] for r in results):.2f} | "
              f"{after['anon']:.0f} + {after['file']:.0f} | {end['anon']:.0f} + {end['file']:.0f} | "
              f"{max(r['peak_rss_mb'] for r in results):.0f} |")
    for positions in sorted({p for p, _ in rows}):
        fw = {side: statistics.median([s for res in rows[(positions, side)] for s in res["forward_s"][1:]] or
                                      [s for res in rows[(positions, side)] for s in res["forward_s"]])
              for side in ("rudder", "rudder, copied", "eager")}
        sums = [res["checksum"] for side in fw for res in rows[(positions, side)]]
        print(f"L = {positions}: forward time, eager / rudder {fw['eager'] / fw['rudder']:.2f}x, eager / rudder with "
              f"RUDDER_MAP_WEIGHTS=0 {fw['eager'] / fw['rudder, copied']:.2f}x; checksums {min(sums):.6g} .. {max(sums):.6g}")
    bd3lm_cache(args)


def bd3lm_cache(args):
    """The same weights as BD3-LM checkpoints (bd3lm-owt-block_size4's and -16's config fields; the network is MDLM's
    with block-causal attention), decoded one position a call from the middle of the sequence, with the key/value
    cache of finished blocks and without it (rudder_bd3lm_cache_bench: both in one process, call by call)."""
    bench = args.bd3lm_bench or os.path.join(os.path.dirname(args.bench), "rudder_bd3lm_cache_bench")
    print("| L | block | cached ms/call | recomputed ms/call | speed-up | largest difference |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: |")
    for block in (4, 16):
        folder = args.dir.rstrip("/") + f"-bd3lm{block}"
        os.makedirs(folder, exist_ok=True)
        config = json.load(open(os.path.join(args.dir, "config.json")))
        config.update(architectures=["BD3LM"], model_type="bd3lm", block_size=block, adaln=True, attn_backend="sdpa",
                      causal=False, cross_attn=True, var_min=True, sampling_eps_min=1e-3, sampling_eps_max=1.0)
        with open(os.path.join(folder, "config.json"), "w") as f:
            json.dump(config, f)
        weights = os.path.join(folder, "model.safetensors")
        if not os.path.exists(weights):
            os.symlink(os.path.abspath(os.path.join(args.dir, "model.safetensors")), weights)
        for positions in [int(x) for x in args.positions.split(",")]:
            r = run([bench, folder, str(positions), str(args.bd3lm_calls)], {})
            print(f"| {positions} | {block} | {r['cached_ms_per_call']:.1f} | {r['uncached_ms_per_call']:.1f} | "
                  f"{r['speedup']:.1f}x | {r['max_difference_at_the_current_block']:.1e} |", flush=True)


if __name__ == "__main__":
    main()
