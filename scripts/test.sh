#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The test command: builds everything, then runs the C++ tests (CUDA tests skip without a GPU, and say
# so) and the Python package's tests, with the package installed into the project's .venv.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh
export PATH="$PWD/.venv/bin:$PATH"
ctest --preset default -j "$(nproc)"
if [ -f pyproject.toml ] && [ -d tests/python ]; then
  # CPU build of the extension: the kernels were already compiled (and linked) by the CMake build above.
  PASA_ENABLE_CUDA=OFF .venv/bin/python -m pip install -q --no-build-isolation .
  .venv/bin/python -m pytest -q tests/python
fi
