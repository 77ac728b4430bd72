# SPDX-License-Identifier: Apache-2.0
"""Figures 9 and 10 of the PASA paper from `pasa study` results: relative RMSE per policy along each
sweep (top) and the share of NaN outputs (bottom), each policy with its own marker.

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
MARKERS = ["o", "s", "^", "D", "v", "P", "X", "*"]


def save_whole(fig, path):
    """Writes the figure to path whole or not at all: drawn into a temporary beside it and renamed, so a
    failed write (a full disk, a file size limit) leaves the earlier file, not a truncated one."""
    temporary = f"{path}.{os.getpid()}.tmp"
    try:
        fig.savefig(temporary, dpi=110, format="png")
        os.replace(temporary, path)
    except BaseException:
        if os.path.exists(temporary):
            os.remove(temporary)
        raise


def main(results_path, outdir):
    with open(results_path) as f:
        document = json.load(f)
    rows = document["rows"]
    policies = list(dict.fromkeys(r["policy"] for r in rows))
    shape = document["shape"]
    subtitle = (f"shape ({shape['batch']}, {shape['heads']}, {shape['seq']}, {shape['dim']}), "
                f"seed {document['seed']}, pasa {document['pasa_version']}")
    for name, dist, axis, keep, title in SWEEPS:
        fig, (ax, ax_nan) = plt.subplots(2, 1, figsize=(5.5, 5.5), sharex=True,
                                         gridspec_kw={"height_ratios": [3, 1.3]})
        for i, policy in enumerate(policies):
            marker = MARKERS[i % len(MARKERS)]
            pts = sorted((r[axis], r["rmse"], r["nan_share"]) for r in rows
                         if r["dist"] == dist and r["policy"] == policy and keep(r))
            finite = [(x, y) for x, y, _ in pts if y is not None and y > 0 and math.isfinite(y)]
            line, = ax.plot([x for x, _ in finite], [y for _, y in finite], marker=marker,
                            label=policy)
            # NaN shares as percentages, so 0.04% and 100% look as different as they are.
            ax_nan.plot([x for x, _, _ in pts], [100 * s for _, _, s in pts], marker=marker,
                        color=line.get_color(), linestyle="--" if i % 2 else "-",
                        markerfacecolor="none", label=policy)
        ax.set_yscale("log")
        ax.set_ylabel("relative RMSE (Eq. 19)")
        ax.set_title(f"{title}\n{subtitle}", fontsize=9)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
        ax_nan.set_yscale("symlog", linthresh=0.01)
        ax_nan.set_ylim(0, 150)
        ax_nan.set_ylabel("NaN outputs (%)")
        ax_nan.set_xlabel("mean x0" if axis == "x0" else "amplitude Am")
        ax_nan.grid(True, which="both", alpha=0.3)
        fig.tight_layout()
        path = os.path.join(outdir, name)
        save_whole(fig, path)
        plt.close(fig)
        print(path)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
