#!/usr/bin/env bash
# The test command: builds everything, then runs the C++ tests (CUDA tests skip without a GPU, and say
# so) and the Python package's tests.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh
ctest --preset default -j "$(nproc)"
if [ -f pyproject.toml ] && [ -d tests/python ]; then
  # CPU build of the extension: the kernels were already compiled (and linked) by the CMake build above.
  export PASA_ENABLE_CUDA=OFF
  python3 -m pip install -q --no-build-isolation . 2>/dev/null ||
    python3 -m pip install -q --no-build-isolation --break-system-packages .
  python3 -m pytest -q tests/python
fi
