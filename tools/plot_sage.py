# SPDX-License-Identifier: Apache-2.0
"""Charts of `pasa study sage` results: 1 - CosSim (average and worst input) of each variant on
a log axis, so 99.7% and 99.96% look as different as they are; one PNG a table.

Usage: plot_sage.py RESULTS.json OUTDIR  (prints the paths of the PNGs it writes)
"""
import json
import math
import os
import re
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

FLOOR = 1e-9  # 1 - CosSim below this (or exactly 0) is drawn at the floor


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
    tables = list(dict.fromkeys(r["table"] for r in rows if r["table"] != "PASA Table 4 inputs"))
    for table in tables:
        variants = list(dict.fromkeys(r["variant"] for r in rows if r["table"] == table))
        avg, worst = [], []
        for v in variants:
            # A non-finite output has no CosSim: 1 - CosSim = 1, the worst there is.
            miss = [1.0 - r["cos_sim"] if r["cos_sim"] is not None and math.isfinite(r["cos_sim"])
                    else 1.0 for r in rows if r["table"] == table and r["variant"] == v]
            avg.append(max(FLOOR, sum(miss) / len(miss)))
            worst.append(max(FLOOR, max(miss)))
        fig, ax = plt.subplots(figsize=(6.5, 4))
        xs = range(len(variants))
        # (markers, not bars: a bar on a log axis starts at an arbitrary bottom, so its length says
        # nothing; with the bottom just below the smallest value, 1.8x looked like 20x)
        ax.plot([x - 0.1 for x in xs], avg, "o", label="average")
        ax.plot([x + 0.1 for x in xs], worst, "v", label="worst input")
        ax.set_xticks(list(xs))
        ax.set_xticklabels(variants, rotation=20, ha="right")
        ax.set_yscale("log")
        ax.set_ylabel("1 - CosSim against fp64 (lower is better)")
        shape = document["shape"]
        ax.set_title(f"{table}\nshape ({shape['batch']}, {shape['heads']}, {shape['seq']}, "
                     f"{shape['dim']}), seed {document['seed']}", fontsize=9)
        ax.set_xlim(-0.6, len(variants) - 0.4)
        ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8)
        ax.grid(True, axis="y", which="both", alpha=0.3)
        fig.tight_layout()
        name = "sage_" + re.sub(r"[^a-z0-9]+", "_", table.lower()).strip("_")[:40] + ".png"
        path = os.path.join(outdir, name)
        save_whole(fig, path)
        plt.close(fig)
        print(path)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
