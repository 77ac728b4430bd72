#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The test command: builds everything, then runs the C++ tests (CUDA tests skip without a GPU, and say
# so) and the Python package's tests, with the package installed into the project's .venv. The torch
# tests (the custom op, pasa.sdpa against torch, torch.compile, capture and patch, the transformers
# and diffusers integrations) run where torch is installed there: PASA_TEST_TORCH=1 installs it from
# PyPI first (scripts/install-torch.sh: about 5 GB with the CUDA libraries its wheel brings); without
# it they skip, and say so.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh
export PATH="$PWD/.venv/bin:$PATH"
ctest --preset default -j "$(nproc)"
# (ctest lists skipped tests without their reason: the CUDA tests' own line says it)
if [ -x build/tests/pasa_cuda_tests ]; then
  build/tests/pasa_cuda_tests --gtest_filter='CudaPool.*' 2>&1 | grep -m1 "CUDA tests skipped" || true
fi
if [ -f pyproject.toml ] && [ -d tests/python ]; then
  # CPU build of the extension: the kernels were already compiled (and linked) by the CMake build above.
  PASA_ENABLE_CUDA=OFF .venv/bin/python -m pip install -q --no-build-isolation .
  if [ "${PASA_TEST_TORCH:-0}" = 1 ]; then
    bash scripts/install-torch.sh
  fi
  .venv/bin/python -m pytest -q -rs tests/python
fi
