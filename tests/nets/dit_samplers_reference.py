#!/usr/bin/python3
"""What MDLM's _sample() with its default predictor, ddpm_cache (kuleshov-group/mdlm, diffusion.py), and SEDD's
pc_sampler (louaaron/Score-Entropy-Discrete-Diffusion, sampling.py; euler and analytic predictors, absorbing graph)
write for the checkpoints dit_checkpoint_fixture.py makes, for tests/nets/dit_checkpoint_test.

Written here from the descriptions of those loops (docs/checkpoints.md, "The authors' samplers") over the fixture's
float64 network, not taken from the authors' code; the note of issue 46 says how it was compared with their own
functions. Randomness as theirs: torch.manual_seed(seed), then torch.rand_like over the float32 grid of every
step (SEDD's noise removal: less the mask's column), batch after batch.

usage: dit_samplers_reference.py CASES.json OUT.json
  CASES.json: [{"dir": checkpoint folder, "sampler": "mdlm" | "sedd", "seed": int, "samples": int,
                "batch_size": int, "steps": int, "eps": float, "noise_removal": bool,
                "predictor": "euler" | "analytic" (sedd)}, ...]
  OUT.json:   [[[ids of each sample's sequence], ...], ...] in the same order
"""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch  # noqa: E402

from authors_samplers_reference import load  # noqa: E402
from dit_checkpoint_fixture import clean_log_probs, reference_raw, sedd_log_score  # noqa: E402

NOISE_EPS = 1e-3  # MDLM's and SEDD's log-linear noise: sigma(t) = -log(1 - (1 - eps) t)


def total_noise(t):
    return -torch.log1p(-(1 - NOISE_EPS) * t)


def rate_noise(t):
    return (1 - NOISE_EPS) / (1 - (1 - NOISE_EPS) * t)


def log_p0(w, config, x, t):
    """SUBS clean-token log-probabilities [B, L, V] (float64) of the float64 network at times t (float32 [B, 1])."""
    sigma = total_noise(t[:, 0])
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


def sedd_score(w, x, sigma):
    """SEDD's score [B, L, V] (float32) of the float64 network at noise levels sigma (float32 [B])."""
    raw = reference_raw(w, "", x, sigma, True)
    return sedd_log_score(raw, x, sigma.double()).exp().float()


def sedd_batch(w, config, batch, steps, eps, predictor, noise_removal):
    """The absorbing graph: a masked position moves to token y with c s_y and stays with 1 - c sum_y s_y (euler:
    c = dt sigma'(t); analytic: c = e^(sigma(t) - sigma(t - dt)) - 1); an unmasked position keeps its token."""
    mask_id = config["tokens"]
    x = torch.full((batch, config["model"]["length"]), mask_id, dtype=torch.long)
    times = torch.linspace(1, eps, steps + 1)
    dt = (1 - eps) / steps

    def stay_or_move(score, c):
        masked = (x == mask_id)[..., None]
        moves = c * score
        moves[..., mask_id] = 1 - (c * score[..., :mask_id].sum(-1, keepdim=True))[..., 0]
        return torch.where(masked, moves, torch.nn.functional.one_hot(x, mask_id + 1).float())

    for i in range(steps):
        t = times[i] * torch.ones(batch, 1)
        if predictor == "euler":
            score = sedd_score(w, x, total_noise(t)[:, 0])
            c = (dt * rate_noise(t))[..., None]
        else:
            sigma = total_noise(t)
            score = sedd_score(w, x, sigma[:, 0])
            c = ((sigma - total_noise(t - dt)).exp() - 1)[..., None]
        probs = stay_or_move(score, c)
        u = torch.rand_like(probs)
        x = (probs / (1e-10 - (u + 1e-10).log())).argmax(-1)
    if noise_removal:
        sigma = total_noise(times[-1] * torch.ones(batch))
        score = sedd_score(w, x, sigma)
        probs = stay_or_move(score, (sigma.exp() - 1)[:, None, None])[..., :mask_id]
        u = torch.rand_like(probs)
        x = (probs / (1e-10 - (u + 1e-10).log())).argmax(-1)
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
            if case["sampler"] == "sedd":
                x = sedd_batch(w, config, batch, case["steps"], case["eps"], case["predictor"], case["noise_removal"])
            else:
                x = mdlm_batch(w, config, batch, case["steps"], case["eps"], case["noise_removal"])
            rows += x.tolist()
            left -= batch
        out.append(rows)
    with open(sys.argv[2], "w", encoding="utf-8") as f:
        json.dump(out, f)


if __name__ == "__main__":
    main()
