#!/usr/bin/env python3
"""Plot a CDCD denoiser's learned time warp over its training: scripts/plot_time_warp.py MODEL OUT.png

MODEL is the model folder `rudder train` wrote (config.json and train_log.jsonl, whose lines carry the warp's CDF
and the running mean loss per bin; docs/training.md). Left: the warp, warped time u against the noise level sigma
it maps to, at a few points of training. Right: the running mean cross-entropy per bin that the warp is fitted to.
Needs matplotlib (Debian: python3-matplotlib).
"""
import argparse
import json
import math
import pathlib
import sys


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", type=pathlib.Path, help="a CDCD model folder (config.json, train_log.jsonl)")
    parser.add_argument("out", type=pathlib.Path, help="the PNG to write")
    parser.add_argument("--curves", type=int, default=5, help="how many points of training to draw (default 5)")
    args = parser.parse_args()

    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("plot_time_warp.py needs matplotlib (Debian: apt install python3-matplotlib)", file=sys.stderr)
        return 2

    config_file, log_file = args.model / "config.json", args.model / "train_log.jsonl"
    for f in (config_file, log_file):
        if not f.is_file():
            print(f"{f}: no such file (is {args.model} a model folder rudder train wrote?)", file=sys.stderr)
            return 2
    schedule = json.loads(config_file.read_text()).get("schedule", {})
    if schedule.get("name") != "cdcd":
        print(f"{config_file}: not a CDCD model (its schedule is {schedule.get('name')!r}, not 'cdcd')", file=sys.stderr)
        return 2
    rows = [json.loads(line) for line in log_file.read_text().splitlines() if line.strip()]
    rows = [r for r in rows if "warp" in r and "warp_loss" in r]
    if not rows:
        print(f"{log_file}: no line carries the warp (trained before the trainer logged it?)", file=sys.stderr)
        return 2

    lo, hi = math.log(schedule["sigma_min"]), math.log(schedule["sigma_max"])
    bins = len(rows[-1]["warp_loss"])
    edges = [math.exp(lo + (hi - lo) * j / bins) for j in range(bins + 1)]
    centres = [math.exp(lo + (hi - lo) * (j + 0.5) / bins) for j in range(bins)]
    count = max(1, min(args.curves, len(rows)))
    picks = sorted({round(i * (len(rows) - 1) / max(count - 1, 1)) for i in range(count)})

    fig, (warp_ax, loss_ax) = plt.subplots(1, 2, figsize=(11, 4.2))
    colours = plt.cm.viridis([i / max(len(picks) - 1, 1) for i in range(len(picks))])
    for colour, i in zip(colours, picks):
        row = rows[i]
        label = f"step {row['step']}"
        warp_ax.plot(edges, row["warp"], color=colour, label=label)
        loss_ax.plot(centres, row["warp_loss"], color=colour, label=label)
    for ax in (warp_ax, loss_ax):
        ax.set_xscale("log")
        ax.set_xlabel("noise level σ")
        ax.grid(alpha=0.3)
    warp_ax.plot(edges, [j / bins for j in range(bins + 1)], color="grey", linestyle=":", label="uniform in log σ")
    warp_ax.set_ylabel("warped time u = F(σ)")
    warp_ax.set_title("learned time warp (steps go where F rises)")
    warp_ax.legend(fontsize=8)
    loss_ax.set_ylabel("cross-entropy per position (running mean)")
    loss_ax.set_title("the loss the warp is fitted to")
    fig.suptitle(f"{args.model.name}: {schedule.get('warp_uniform', 0)} of the levels uniform, the rest by the warp", fontsize=10)
    fig.tight_layout()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(args.out, dpi=110)
    print(f"wrote {args.out} ({len(picks)} points of training from {log_file})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
