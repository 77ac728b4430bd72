# SPDX-License-Identifier: Apache-2.0
"""Bar charts of `pasa study sage` results: average and worst CosSim of each variant, one PNG a table.

Usage: plot_sage.py RESULTS.json OUTDIR  (prints the paths of the PNGs it writes)
"""
import json
import os
import re
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main(results_path, outdir):
    with open(results_path) as f:
        rows = json.load(f)
    tables = list(dict.fromkeys(r["table"] for r in rows if r["table"] != "PASA Table 4 inputs"))
    for table in tables:
        variants = list(dict.fromkeys(r["variant"] for r in rows if r["table"] == table))
        avg, worst = [], []
        for v in variants:
            cos = [r["cos_sim"] if r["cos_sim"] is not None else 0.0
                   for r in rows if r["table"] == table and r["variant"] == v]
            avg.append(100 * sum(cos) / len(cos))
            worst.append(100 * min(cos))
        fig, ax = plt.subplots(figsize=(6.5, 4))
        xs = range(len(variants))
        ax.bar([x - 0.2 for x in xs], avg, width=0.4, label="average")
        ax.bar([x + 0.2 for x in xs], worst, width=0.4, label="worst input")
        ax.set_xticks(list(xs))
        ax.set_xticklabels(variants, rotation=20, ha="right")
        ax.set_ylabel("CosSim (%) against fp64")
        ax.set_ylim(max(0.0, min(worst) - 5), 100.5)
        ax.set_title(table, fontsize=10)
        ax.legend()
        ax.grid(True, axis="y", alpha=0.3)
        fig.tight_layout()
        name = "sage_" + re.sub(r"[^a-z0-9]+", "_", table.lower()).strip("_")[:40] + ".png"
        path = os.path.join(outdir, name)
        fig.savefig(path, dpi=110)
        plt.close(fig)
        print(path)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
