# SPDX-License-Identifier: Apache-2.0
"""Figures 9 and 10 of the PASA paper from `pasa study` results: relative RMSE per policy along each sweep.

Usage: plot_study.py RESULTS.json OUTDIR  (prints the paths of the PNGs it writes)
"""
import json
import math
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

SWEEPS = [
    ("figure9a_uniform_mean.png", "uniform", "x0", lambda r: r["am"] == 0.5, "uniform, Am = 0.5"),
    ("figure9b_uniform_amplitude.png", "uniform", "am", lambda r: r["x0"] == 20, "uniform, x0 = 20"),
    ("figure10a_hybrid_mean.png", "hybrid", "x0", lambda r: r["am"] == 10, "hybrid, Am = 10"),
    ("figure10b_hybrid_amplitude.png", "hybrid", "am", lambda r: r["x0"] == 20, "hybrid, x0 = 20"),
]


def main(results_path, outdir):
    with open(results_path) as f:
        rows = json.load(f)
    policies = list(dict.fromkeys(r["policy"] for r in rows))
    for name, dist, axis, keep, title in SWEEPS:
        fig, ax = plt.subplots(figsize=(5.5, 4))
        overflowed = []  # (x, colour) of cases whose output is not finite
        for policy in policies:
            pts = sorted((r[axis], r["rmse"]) for r in rows
                         if r["dist"] == dist and r["policy"] == policy and keep(r))
            xs = [x for x, y in pts if y is not None and y > 0 and math.isfinite(y)]
            ys = [y for x, y in pts if y is not None and y > 0 and math.isfinite(y)]
            line, = ax.plot(xs, ys, marker="o", label=policy)
            overflowed += [(x, line.get_color()) for x, y in pts if y is None]
        ax.set_yscale("log")
        bottom = ax.get_ylim()[0]
        for x, colour in overflowed:  # non-finite outputs: an x on the axis in the policy's colour
            ax.plot([x], [bottom], "x", color=colour, markersize=10, mew=2, clip_on=False)
        ax.set_xlabel("mean x0" if axis == "x0" else "amplitude Am")
        ax.set_ylabel("relative RMSE (Eq. 19)")
        ax.set_title(title + " (x: output not finite)")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend()
        fig.tight_layout()
        path = os.path.join(outdir, name)
        fig.savefig(path, dpi=110)
        plt.close(fig)
        print(path)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
