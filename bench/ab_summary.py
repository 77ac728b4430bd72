# SPDX-License-Identifier: Apache-2.0
"""The table of bench/ab_builds.sh: for each point of `pasa bench` (method, dtype, D, S, causal), the
median TFLOP/s of each build over its rounds and their ratio new / old; then, per method, the
geometric mean, least and largest ratio. Usage: python3 bench/ab_summary.py DIR (the ab-*.csv files)."""
import csv
import glob
import os
import statistics
import sys


def main(directory: str) -> None:
    rates = {}
    for path in sorted(glob.glob(os.path.join(directory, "ab-*-*.csv"))):
        side = os.path.basename(path).split("-")[1]
        with open(path, newline="") as f:
            for row in csv.DictReader(f):
                point = (row["method"], row["dtype"], row["D"], row["S"], row["causal"])
                rates.setdefault(point, {}).setdefault(side, []).append(float(row["tflops"]))
    ratios = {}
    print(f"{'method':24} {'dtype':5} {'D':>4} {'S':>6} {'causal':>6} {'old':>8} {'new':>8} {'new/old':>8}")
    for point in sorted(rates):
        sides = rates[point]
        if "new" not in sides or "old" not in sides:
            continue
        old, new = statistics.median(sides["old"]), statistics.median(sides["new"])
        ratios.setdefault(point[0], []).append(new / old)
        print(f"{point[0]:24} {point[1]:5} {point[2]:>4} {point[3]:>6} {point[4]:>6} {old:8.1f} {new:8.1f} {new / old:8.3f}")
    for method, values in ratios.items():
        print(f"{method}: new/old geometric mean {statistics.geometric_mean(values):.3f}, "
              f"least {min(values):.3f}, largest {max(values):.3f} ({len(values)} points)")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python3 bench/ab_summary.py DIR")
    main(sys.argv[1])
