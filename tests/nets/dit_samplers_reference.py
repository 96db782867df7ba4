#!/usr/bin/python3
"""What MDLM's _sample() with its default predictor, ddpm_cache (kuleshov-group/mdlm, diffusion.py), writes for the
MDLM checkpoints dit_checkpoint_fixture.py makes, for tests/nets/dit_checkpoint_test.

Written here from the description of that loop (docs/checkpoints.md, "The authors' samplers") over the fixture's
float64 network, not taken from the authors' code; the note of issue 46 says how it was compared with MDLM's own
functions. Randomness as theirs: torch.manual_seed(seed), then torch.rand_like over the float32 [batch, length,
vocabulary] grid at every step, batch after batch.

usage: dit_samplers_reference.py CASES.json OUT.json
  CASES.json: [{"dir": checkpoint folder, "seed": int, "samples": int, "batch_size": int, "steps": int,
                "eps": float, "noise_removal": bool}, ...]
  OUT.json:   [[[ids of each sample's sequence], ...], ...] in the same order
"""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch  # noqa: E402

from authors_samplers_reference import load  # noqa: E402
from dit_checkpoint_fixture import clean_log_probs, reference_raw  # noqa: E402

NOISE_EPS = 1e-3  # MDLM's log-linear noise: sigma(t) = -log(1 - (1 - eps) t)


def log_p0(w, config, x, t):
    """SUBS clean-token log-probabilities [B, L, V] (float64) of the float64 network at times t (float32 [B, 1])."""
    sigma = -torch.log1p(-(1 - NOISE_EPS) * t[:, 0])
    raw = reference_raw(w, "backbone.", x, sigma, config["time_conditioning"])
    return clean_log_probs(raw, x, config["vocab_size"] - 1)


def mdlm_batch(w, config, batch, steps, eps, noise_removal):
    mask_id = config["vocab_size"] - 1
    x = torch.full((batch, config["model_length"]), mask_id, dtype=torch.long)
    times = torch.linspace(1, eps, steps + 1)
    dt = (1 - eps) / steps
    p0 = None
    for i in range(steps):
        t = times[i] * torch.ones(batch, 1)
        if p0 is None:
            p0 = log_p0(w, config, x, t).exp().float()
        move_t = t[:, 0][:, None, None]
        move_s = (t[:, 0] - dt)[:, None, None]
        q = p0 * (move_t - move_s)
        q[:, :, mask_id] = move_s[:, :, 0]
        u = torch.rand_like(q)
        drawn = (q / (1e-10 - (u + 1e-10).log())).argmax(-1)
        following = torch.where(x != mask_id, x, drawn)
        if not torch.equal(following, x) or config["time_conditioning"]:
            p0 = None  # the cache holds while nothing changes, and never for a network that reads t
        x = following
    if noise_removal:
        x = log_p0(w, config, x, times[-1] * torch.ones(batch, 1)).argmax(-1)
    return x


def main():
    with open(sys.argv[1], encoding="utf-8") as f:
        cases = json.load(f)
    out = []
    for case in cases:
        w, config = load(case["dir"])
        torch.manual_seed(case["seed"])
        rows = []
        left = case["samples"]
        while left > 0:
            batch = min(left, case["batch_size"])
            rows += mdlm_batch(w, config, batch, case["steps"], case["eps"], case["noise_removal"]).tolist()
            left -= batch
        out.append(rows)
    with open(sys.argv[2], "w", encoding="utf-8") as f:
        json.dump(out, f)


if __name__ == "__main__":
    main()
