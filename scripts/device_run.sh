#!/usr/bin/env bash
# One device call: build pasa with the CUDA kernels (fresh build dir, sm_90a), run the GPU tests,
# compute-sanitizer (memcheck + racecheck) on a small filter, then the benchmarks (pasa's kernels and
# torch SDPA flash / cuDNN on the same points) and print a TFLOP/s table last.
#
# Run from the repository root on a machine with an sm_90 GPU: bash scripts/device_run.sh. Where that
# machine lacks fmt / GoogleTest / nlohmann-json, copy a prefix of them to build-devdeps/usr first (it
# is used as CMAKE_PREFIX_PATH when present). Logs and CSVs land in $OUT (default /tmp/pasa-out).
set -uo pipefail
ROOT=$(pwd)
OUT=${OUT:-/tmp/pasa-out}
mkdir -p "$OUT"
BUILD=/tmp/pasa-build-$$  # never the carried tree
T0=$(date +%s)
phase() { echo; echo "=== $1 ($(( $(date +%s) - T0 )) s)"; }

phase "machine"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv
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
  -DPASA_BUILD_CLI=OFF "${PREFIX_ARGS[@]}" >"$OUT/build.log" 2>&1 \
  || { tail -40 "$OUT/build.log"; exit 1; }
grep "pasa: CUDA" "$OUT/build.log"

phase "build"
cmake --build "$BUILD" -j16 --target pasa_core pasa_cuda_tests >>"$OUT/build.log" 2>&1 \
  || { grep -E "error|Error" "$OUT/build.log" | head -40; tail -20 "$OUT/build.log"; exit 1; }
grep -E "spill|warning" "$OUT/build.log" | sort -u | head -20

phase "tests"
"$BUILD/tests/pasa_cuda_tests" >"$OUT/tests.log" 2>&1
TESTS_RC=$?
grep -E "Failure|FAILED|PASSED|SKIPPED|Expected|kernel .* vs emulator|uniform" "$OUT/tests.log" | tail -20

if command -v compute-sanitizer >/dev/null; then
  FILTER='CudaExact.DefaultPolicy*:CudaPasa.BetaZero*:CudaBadInput.*'
  phase "compute-sanitizer memcheck ($FILTER)"
  compute-sanitizer --tool memcheck --error-exitcode 9 "$BUILD/tests/pasa_cuda_tests" \
    --gtest_filter="$FILTER" >"$OUT/sanitizer.log" 2>&1
  echo "memcheck rc=$?"
  phase "compute-sanitizer racecheck"
  compute-sanitizer --tool racecheck --error-exitcode 9 "$BUILD/tests/pasa_cuda_tests" \
    --gtest_filter='CudaPasa.BetaZero*:CudaExact.DefaultPolicy*' >>"$OUT/sanitizer.log" 2>&1
  echo "racecheck rc=$?"
  grep -E "ERROR SUMMARY|RACECHECK SUMMARY|PASSED|FAILED" "$OUT/sanitizer.log"
fi

phase "bench build"
LIBDIRS=()
[ -d build-devdeps/usr ] && LIBDIRS=(-L"$ROOT/build-devdeps/usr/lib/x86_64-linux-gnu")
nvcc -O3 -std=c++20 -gencode=arch=compute_90a,code=sm_90a -Iinclude -Isrc bench/bench_attention.cu \
  "$BUILD/libpasa_core.a" "${LIBDIRS[@]}" -lfmt -Xcompiler -fopenmp -o "$BUILD/bench_attention" 2>&1 | tail -5

phase "bench: pasa kernels"
[ -x "$BUILD/bench_attention" ] && "$BUILD/bench_attention" "$OUT/pasa_bench.csv" >"$OUT/pasa_bench.log" 2>&1
head -1 "$OUT/pasa_bench.log"; grep -iE "error" "$OUT/pasa_bench.log" | head -5

phase "bench: torch SDPA (and the table)"
PYTHONUNBUFFERED=1 python3 bench/torch_sdpa.py "$OUT/pasa_bench.csv" "$OUT/torch_sdpa.csv" 2>&1 \
  | tee "$OUT/torch_sdpa.log" | grep -E -v "^torch-(flash|cudnn) "

phase "done: tests rc=$TESTS_RC"
exit "$TESTS_RC"
