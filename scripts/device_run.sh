#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# One device call: build pasa with the CUDA kernels (fresh build dir, sm_90a), run the GPU tests,
# compute-sanitizer (memcheck + racecheck) on a small filter, then the benchmarks (`pasa bench`, the
# kernels' variants, torch SDPA flash / cuDNN on the same points) and print the tables last.
#
# Run from the repository root on a machine with an sm_90 GPU: bash scripts/device_run.sh. Where that
# machine lacks GoogleTest, copy a prefix of it to build-devdeps/usr first (it
# is used as CMAKE_PREFIX_PATH when present). Logs and CSVs land in $OUT (default /tmp/pasa-out).
# Phases that can be left out to fit a short device call: PASA_VARIANTS=0 (the prefill and decode
# kernels' variant benchmarks in bench/, and their compilation), PASA_PYTHON=0 (the Python package and its tests);
# PASA_TEST_FILTER=<gtest filter> runs only those GPU tests, PASA_PYTEST="<files>" only those Python tests; PASA_BENCH_ARGS="--policy sage8 ..." narrows
# `pasa bench` to some points (PASA_CPP_BENCH=0 leaves it out, PASA_TORCH_SDPA=0 the torch table after
# it); PASA_COMPARE=1 adds bench/python_compare.py (PASA_COMPARE_ARGS=--quick:
# S 1k and 4k only).
set -uo pipefail
ROOT=$(pwd)
OUT=${OUT:-/tmp/pasa-out}
mkdir -p "$OUT"
BUILD=/tmp/pasa-build-$$  # never the carried tree
T0=$(date +%s)
phase() { echo; echo "=== $1 ($(( $(date +%s) - T0 )) s)"; }

phase "machine"
if ! nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv; then
  echo "device_run.sh: no NVIDIA GPU on this machine (nvidia-smi found none); the CPU tests are scripts/test.sh"
  exit 1
fi
nvcc --version | tail -2
cmake --version | head -1

PREFIX_ARGS=()
if [ -d build-devdeps/usr ]; then
  PREFIX_ARGS=(-DCMAKE_PREFIX_PATH="$ROOT/build-devdeps/usr")
  export LD_LIBRARY_PATH="$ROOT/build-devdeps/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}"
fi
GEN=(-G "Unix Makefiles")
command -v ninja >/dev/null && GEN=(-G Ninja)

phase "configure"
cmake -S . -B "$BUILD" "${GEN[@]}" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90a \
  "${PREFIX_ARGS[@]}" >"$OUT/build.log" 2>&1 \
  || { tail -40 "$OUT/build.log"; exit 1; }
grep "pasa: CUDA" "$OUT/build.log"

phase "build"
cmake --build "$BUILD" -j "$(nproc)" --target pasa_core pasa_cuda_tests pasa_cli >>"$OUT/build.log" 2>&1 \
  || { grep -E "error|Error" "$OUT/build.log" | head -40; tail -20 "$OUT/build.log"; exit 1; }
grep -E "spill|warning" "$OUT/build.log" | sort -u | head -20

# The variants benchmark (bench/) compiles on the CPUs while the tests use the GPU.
LIBDIRS=()
[ -d build-devdeps/usr ] && LIBDIRS=(-L"$ROOT/build-devdeps/usr/lib/x86_64-linux-gnu")
[ "${PASA_VARIANTS:-1}" = 0 ] || ( nvcc -O3 -std=c++20 --expt-relaxed-constexpr -gencode=arch=compute_90a,code=sm_90a -Iinclude -Isrc \
    -Xptxas -warn-spills bench/bench_attention.cu bench/decode_variants.cu bench/fwd_variants.cu "$BUILD/libpasa_core.a" \
    "${LIBDIRS[@]}" -Xcompiler -fopenmp -o "$BUILD/bench_attention" >"$BUILD/bench_build.log" 2>&1 ) &
BENCH_BUILD=$!

phase "tests"
"$BUILD/tests/pasa_cuda_tests" --gtest_filter="${PASA_TEST_FILTER:-*}" >"$OUT/tests.log" 2>&1
TESTS_RC=$?
grep -E "Failure|FAILED|PASSED|SKIPPED|Expected|kernel .* vs emulator" "$OUT/tests.log" | tail -20
# The portable path forced for the whole process, as PASA_CUDA_PATH does for users.
PASA_CUDA_PATH=portable "$BUILD/tests/pasa_cuda_tests" \
  --gtest_filter="${PASA_TEST_FILTER:-*Exact*:*Pasa*:*Decode*:*HeadDims*:*PathChoice*:*BadInput*:*Graph*-*SeedSweep*}" \
  >"$OUT/tests_portable.log" 2>&1 || TESTS_RC=1
echo "PASA_CUDA_PATH=portable:"; grep -E "FAILED|PASSED" "$OUT/tests_portable.log" | tail -10
cat "$OUT/tests_portable.log" >>"$OUT/tests.log" && rm "$OUT/tests_portable.log"  # $OUT returns at most 8 files
echo "sage8 cases (kernel vs emulator):"; awk '/RUN .*CudaSage8/{on=1} /OK .*CudaSage8|FAILED .*CudaSage8/{on=0} on && /O err/' "$OUT/tests.log" | sed 's/  */ /g' | head -50

if command -v compute-sanitizer >/dev/null; then
  FILTER='*CudaExact.DefaultPolicy*:*CudaPasa.BetaZero*:CudaBadInput.*:CudaDecode.PolicySplits*:CudaDecode.FdppLarge*:CudaGraph.*:*CudaSage8.Small/*:*CudaSage8.PrepassClusteredAndInPasses/*:WgmmaLayout.*:CudaKVCache*:CudaVarlen.ExactMatchesTheEmulator:*CudaPasaNumerics.HeadDims96And256/portable'
  phase "compute-sanitizer memcheck ($FILTER)"
  compute-sanitizer --tool memcheck --error-exitcode 9 "$BUILD/tests/pasa_cuda_tests" \
    --gtest_filter="$FILTER" >"$OUT/sanitizer.log" 2>&1
  echo "memcheck rc=$?"
  phase "compute-sanitizer racecheck"
  compute-sanitizer --tool racecheck --error-exitcode 9 "$BUILD/tests/pasa_cuda_tests" \
    --gtest_filter='*CudaPasa.BetaZero*:*CudaExact.DefaultPolicy*:CudaDecode.PolicySplits*:*CudaSage8.Small/*:CudaKVCacheDecode.PagedShuffled*:CudaKVCacheDecode.FdppOnAPagedCache*:*CudaPasaNumerics.HeadDims96And256/portable' >>"$OUT/sanitizer.log" 2>&1
  echo "racecheck rc=$?"
  grep -E "ERROR SUMMARY|RACECHECK SUMMARY|PASSED|FAILED" "$OUT/sanitizer.log"
fi

# The Python package against the kernels: built with the machine's scikit-build-core and nanobind
# (no network), then its whole test suite, the torch/CUDA tests included.
if [ "${PASA_PYTHON:-1}" != 0 ] && python3 -c "import scikit_build_core, nanobind, pytest, torch" 2>/dev/null; then
  phase "python package (CUDA) and its tests"
  PY_PREFIX=()
  [ -d build-devdeps/usr ] && PY_PREFIX=(-Ccmake.define.CMAKE_PREFIX_PATH="$ROOT/build-devdeps/usr")
  CMAKE_BUILD_PARALLEL_LEVEL=16 PASA_CUDA_ARCHS=90a python3 -m pip install -q --no-build-isolation \
    --no-deps --target /tmp/pasa-py -Cbuild-dir=/tmp/pasa-pybuild "${PY_PREFIX[@]}" . \
    >"$BUILD/python_build.log" 2>&1 || tail -20 "$BUILD/python_build.log"
  PYTHONPATH="/tmp/pasa-py:${PASA_PEER_PYTHONPATH:-}" python3 -m pytest -q -p no:cacheprovider ${PASA_PYTEST:-tests/python} \
    >"$BUILD/pytest.log" 2>&1
  echo "pytest rc=$?"
  grep -E "passed|failed|error" "$BUILD/pytest.log" | tail -5
  cat "$BUILD/pytest.log" >>"$OUT/tests.log"
fi

phase "bench build (started before the tests)"
wait "$BENCH_BUILD"
cat "$BUILD/bench_build.log" >>"$OUT/build.log" 2>/dev/null  # $OUT returns at most 8 files
grep -E "error|spill" "$BUILD/bench_build.log" 2>/dev/null | head -10

[ "${PASA_CPP_BENCH:-1}" = 0 ] || {
phase "pasa bench (the public API: exact, pasa, sage8 prefill; exact, fdpp decode)"
"$BUILD/pasa" bench ${PASA_BENCH_ARGS:-} --csv "$OUT/pasa_bench.csv" >"$OUT/pasa_bench.log" 2>&1
echo "pasa bench rc=$?"; head -1 "$OUT/pasa_bench.log"; grep -i "error" "$OUT/pasa_bench.log" | head -5
}

if [ -x "$BUILD/bench_attention" ]; then
  phase "bench/: the kernels' variants, the prepass"
  "$BUILD/bench_attention" "$OUT/variants_bench.csv" >>"$OUT/pasa_bench.log" 2>&1
  grep -E "^decode:v:|pasa-prepass" "$OUT/pasa_bench.log"
  grep "MISMATCH" "$OUT/pasa_bench.log" | sed 's/^/variant output differs: /'
fi

# Hardware counters of one exact and one pasa call per head dim (S 4k, f16): pipe utilization,
# issue slots, shared-memory and L2 traffic, warp stall reasons. Clocks left as they are.
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
if [ "${PASA_NCU:-0}" = 1 ] && [ -n "$NCU" ] && [ -x "$BUILD/bench_attention" ]; then
  phase "ncu ($NCU)"
  timeout 240 "$NCU" --clock-control none -k 'regex:attention_fwd_kernel|pasa_fwd_kernel' --section SpeedOfLight \
    --metrics 'regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio,regex:sm__pipe_.*_cycles_active\.avg\.pct_of_peak_sustained_active,regex:sm__inst_executed_pipe_.*\.avg\.pct_of_peak_sustained_active,smsp__issue_active.avg.pct_of_peak_sustained_active,l1tex__data_pipe_lsu_wavefronts_mem_shared.avg.pct_of_peak_sustained_elapsed,lts__t_sectors.avg.pct_of_peak_sustained_elapsed,sm__warps_active.avg.pct_of_peak_sustained_active' \
    "$BUILD/bench_attention" --profile >"$OUT/ncu.txt" 2>&1
  echo "ncu rc=$?"
  grep -E "attention_fwd_kernel<|pasa_fwd_kernel<|Duration|hmma_cycles_active|smsp__issue_active|stalled_(wait|short_scoreboard|math_pipe_throttle|gmma)_" \
    "$OUT/ncu.txt" | sed -E 's/ +/ /g; s/smsp__average_warps_issue_stalled_/stall /; s/_per_issue_active.ratio//' | cut -c1-100 | head -30
fi

[ "${PASA_TORCH_SDPA:-1}" = 0 ] || {
phase "bench: torch SDPA (and the table)"
CSVS="$OUT/pasa_bench.csv"
[ -f "$OUT/variants_bench.csv" ] && CSVS="$CSVS,$OUT/variants_bench.csv"
PYTHONUNBUFFERED=1 python3 bench/torch_sdpa.py "$CSVS" "$OUT/torch_sdpa.csv" 2>&1 \
  | grep -E -v "^torch-(flash|cudnn) "
}

# The Python comparison (PASA_COMPARE=1; needs the package built above): pasa's policies, torch SDPA,
# and SageAttention2 and cuDNN's FP8 attention where importable (PASA_PEER_PYTHONPATH: where a build
# of SageAttention2 and the unpacked nvidia-cudnn-frontend wheel lie, colon-separated), interleaved.
if [ "${PASA_COMPARE:-0}" = 1 ] && [ -d /tmp/pasa-py ]; then
  phase "python_compare (interleaved in one process)"
  PYTHONUNBUFFERED=1 PYTHONPATH="/tmp/pasa-py:${PASA_PEER_PYTHONPATH:-}" python3 bench/python_compare.py \
    "$OUT/python_compare.csv" ${PASA_COMPARE_ARGS:-} >"$OUT/python_compare.txt" 2>&1
  echo "python_compare rc=$?"
  grep -v "^#" "$OUT/python_compare.txt" | tail -n 70
fi

phase "done: tests rc=$TESTS_RC"
exit "$TESTS_RC"
