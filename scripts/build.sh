#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Installs the dependencies and builds pasa (library, `pasa` CLI, tests) into build/.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
# The CLI tests run the project's .venv Python, not the system's. (`pasa study --plot` runs the first
# python3 on PATH: README.md says how to make that the venv's.)
# PASA_ENABLE_CUDA=OFF leaves the CUDA kernels out where nvcc is installed (they take 10-15 min to
# compile on 2 cores; the CPU build about 2). Passed on every run, so that an earlier OFF does not
# stay in build/'s cache.
# (.venv/bin first: the CMake install-deps.sh put there where the system's is too old)
export PATH="$PWD/.venv/bin:$PATH"
cmake --preset default -DPython3_EXECUTABLE="$PWD/.venv/bin/python" -DPASA_ENABLE_CUDA="${PASA_ENABLE_CUDA:-ON}"
cmake --build --preset default -j "$(nproc)"
