#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# A/B of two builds' speed on one GPU: this working tree (B) against another source tree (A: for
# example `git archive HEAD src include CMakeLists.txt cmake tests tools python pyproject.toml bench
# | tar -x -C .ab/old`, made where git is and carried along), each built for sm_90a into /tmp, then
# `pasa bench` on both in alternating rounds, so that the clock's and the temperature's drift fall on
# both alike, and the ratio B / A per point (bench/ab_summary.py). Run from the repository root:
#   bash bench/ab_builds.sh A_TREE [ROUNDS [pasa bench options ...]]
# ROUNDS defaults to 2; the bench options to `--no-decode`. CSVs (ab-new-<round>.csv, ab-old-<round>.csv)
# and the table land in $OUT (default /tmp/pasa-ab). PASA_PREFIX: a CMAKE_PREFIX_PATH for
# dependencies the machine lacks (GoogleTest).
set -uo pipefail
A_TREE=${1:?usage: bash bench/ab_builds.sh A_TREE [ROUNDS [pasa bench options ...]]}
ROUNDS=${2:-2}
shift $(( $# >= 2 ? 2 : 1 ))
BENCH_ARGS=("$@")
[ ${#BENCH_ARGS[@]} -eq 0 ] && BENCH_ARGS=(--no-decode)
OUT=${OUT:-/tmp/pasa-ab}
mkdir -p "$OUT"
PREFIX=()
[ -n "${PASA_PREFIX:-}" ] && PREFIX=(-DCMAKE_PREFIX_PATH="$PASA_PREFIX")
GEN=(-G "Unix Makefiles")
command -v ninja > /dev/null && GEN=(-G Ninja)
jobs=$(( $(nproc) / 2 > 0 ? $(nproc) / 2 : 1 ))
build() {  # source tree, build dir, log
  cmake -S "$1" -B "$2" "${GEN[@]}" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90a "${PREFIX[@]}" > "$3" 2>&1 \
    && cmake --build "$2" -j "$jobs" --target pasa_cli >> "$3" 2>&1
}
build "$A_TREE" /tmp/pasa-ab-old "$OUT/build-old.log" &
OLD=$!
build . /tmp/pasa-ab-new "$OUT/build-new.log" || { tail -20 "$OUT/build-new.log"; exit 1; }
wait "$OLD" || { tail -20 "$OUT/build-old.log"; exit 1; }
for round in $(seq 1 "$ROUNDS"); do
  for side in new old; do
    "/tmp/pasa-ab-$side/pasa" bench "${BENCH_ARGS[@]}" --csv "$OUT/ab-$side-$round.csv" > "$OUT/bench-$side-$round.log" 2>&1 \
      || { echo "ab_builds: pasa bench ($side, round $round) failed:"; tail -5 "$OUT/bench-$side-$round.log"; exit 1; }
  done
done
python3 "$(dirname "$0")/ab_summary.py" "$OUT" | tee "$OUT/ab_table.txt"
