#!/usr/bin/python3
"""What MDLM's _sample() with its default predictor, ddpm_cache (kuleshov-group/mdlm, diffusion.py), SEDD's
pc_sampler (louaaron/Score-Entropy-Discrete-Diffusion, sampling.py; euler and analytic predictors, absorbing graph)
and BD3-LM's _semi_ar_sampler with first hitting (kuleshov-group/bd3lms, diffusion.py) write for the checkpoints
dit_checkpoint_fixture.py makes, for tests/nets/dit_checkpoint_test.

Written here from the descriptions of those loops (docs/checkpoints.md, "The authors' samplers") over the fixture's
float64 network, not taken from the authors' code; the note of issue 46 says how it was compared with their own
functions. Randomness as theirs: torch.manual_seed(seed), then torch.rand_like over the float32 grid of every
step (SEDD's noise removal: less the mask's column), batch after batch; BD3-LM: a float64 uniform per position and
row of the block, then torch.randint over its masked count, a step, one sequence after another.

usage: dit_samplers_reference.py CASES.json OUT.json
  CASES.json: [{"dir": checkpoint folder, "sampler": "mdlm" | "sedd" | "bd3lm", "seed": int, "samples": int,
                "batch_size": int, "steps": int, "eps": float, "noise_removal": bool,
                "predictor": "euler" | "analytic" (sedd),
                "length": int, "top_p": float, "temperature": float, "prefix": [ids] (bd3lm)}, ...]
  OUT.json:   [[[ids of each sample's sequence], ...] or {"error": message}, ...] in the same order
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


def bd3lm_nucleus(p, top_p):
    """BD3-LM's nucleus: the most probable tokens while their cumulative probability stays within top_p (the first
    always), renormalised; top_p 1 leaves p as it is."""
    if top_p == 1.0:
        return p
    ordered, order = p.sort(dim=-1, descending=True)
    keep = ordered.cumsum(-1) <= top_p
    keep[..., 0] = True
    p = torch.zeros_like(p).scatter(-1, order, ordered * keep)
    return p / p.sum(-1, keepdim=True)


def bd3lm_entropy(tokens):
    """The entropy (nats, float32) of the tokens' frequencies."""
    _, counts = torch.unique(tokens, return_counts=True)
    return torch.special.entr(counts.float() / counts.sum()).sum()


class GaveUp(Exception):
    pass


def bd3lm_sequence(w, config, length, top_p, temperature, prefix):
    """One sequence (BD3-LM's scripts sample one at a time): block by block, each step draws a token at every position
    of the block by Gumbel-max over the float64 clean-token probabilities after the nucleus, then commits one masked
    position of the block, the k-th in order for k = torch.randint(0, masked). A block that ends past position 256 with
    less than 4 nats of entropy in the last 256 tokens starts the sequence again; the 10th such start gives up.
    temperature (Rudder's, not BD3-LM's): the log-probabilities divided by it (0: the arg-max after the nucleus)."""
    mask_id = config["vocab_size"] - 1
    size = config["block_size"]
    for _ in range(10):
        x = torch.full((1, length), mask_id, dtype=torch.long)
        x[0, :len(prefix)] = torch.tensor(prefix, dtype=torch.long)
        failed = False
        for begin in range(0, length, size):
            end = begin + size
            while (x[0, begin:end] == mask_id).any():
                raw = reference_raw(w, "backbone.", x[:, :end], torch.zeros(1), False, block_size=size)
                if temperature not in (0.0, 1.0):
                    raw = raw.clone()
                    raw[..., mask_id] = -float("inf")
                    raw = raw.log_softmax(-1) / temperature
                logp = clean_log_probs(raw, x[:, :end], mask_id)[:, begin:end]
                p = bd3lm_nucleus(logp.float().double().exp(), top_p)  # float32 log-probabilities, widened
                u = torch.rand_like(p)
                drawn = (p if temperature == 0.0 else p / (1e-10 - (u + 1e-10).log())).argmax(-1)
                masked = (x[0, begin:end] == mask_id).nonzero()[:, 0]
                k = torch.randint(0, len(masked), (1,))
                at = masked[k].item()
                x[0, begin + at] = drawn[0, at]
            if end > 256 and bd3lm_entropy(x[0, end - 256:end]) < 4:
                failed = True
                break
        if not failed:
            return x
    raise GaveUp("10 starts each ended in a block of low entropy")


def main():
    with open(sys.argv[1], encoding="utf-8") as f:
        cases = json.load(f)
    out = []
    for case in cases:
        w, config = load(case["dir"])
        torch.manual_seed(case["seed"])
        if case["sampler"] == "bd3lm":
            try:
                out.append([bd3lm_sequence(w, config, case["length"], case["top_p"], case["temperature"],
                                           case["prefix"])[0].tolist() for _ in range(case["samples"])])
            except GaveUp as e:
                out.append({"error": str(e)})
            continue
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
