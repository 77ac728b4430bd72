#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Installs what pasa's build, tests and figures need: Debian packages for the C++ toolchain and
# GoogleTest, and a project virtual environment .venv/ with the Python packages (the system Python is
# left alone). Idempotent: installs only what is missing. The CUDA toolkit is optional: with nvcc on
# the PATH the kernels are built too.
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(cmake ninja-build g++ clang libomp-dev libgtest-dev python3 python3-venv python3-dev)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "install-deps: installing ${missing[*]}"
  sudo_cmd=""
  [ "$(id -u)" -eq 0 ] || sudo_cmd="sudo"
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# The project's Python: tests (ml_dtypes: NumPy bfloat16 arrays), figures and the extension's build
# tools, all from PyPI.
python_packages=(numpy pytest matplotlib scikit-build-core nanobind ml_dtypes)
if [ ! -x .venv/bin/python ]; then
  echo "install-deps: creating the virtual environment .venv"
  python3 -m venv .venv
fi
if ! .venv/bin/python -c "import numpy, pytest, matplotlib, scikit_build_core, nanobind, ml_dtypes" 2>/dev/null; then
  echo "install-deps: installing Python packages ${python_packages[*]} into .venv"
  .venv/bin/python -m pip install -q "${python_packages[@]}"
fi
# CMakePresets.json (schema 6) needs CMake 3.25; older distributions' (Ubuntu 22.04: 3.22, Debian 11:
# 3.18) get PyPI's into .venv, which scripts/build.sh puts first on the PATH.
cmake_version=$(cmake --version 2>/dev/null | head -1 | awk '{print $3}' || true)
if [ ! -x .venv/bin/cmake ] && [ "$(printf '%s\n' 3.25 "${cmake_version:-0}" | sort -V | head -1)" != 3.25 ]; then
  echo "install-deps: CMake ${cmake_version:-(none)} is older than the 3.25 the presets need: installing CMake from PyPI into .venv"
  .venv/bin/python -m pip install -q "cmake>=3.25"
fi
if [ "${PASA_ENABLE_CUDA:-ON}" = OFF ]; then
  echo "install-deps: PASA_ENABLE_CUDA=OFF: building the CPU library, CLI and tests only"
elif command -v nvcc >/dev/null; then
  echo "install-deps: nvcc found: the CUDA kernels will be built (10-15 min on 2 cores; PASA_ENABLE_CUDA=OFF leaves them out)"
else
  echo "install-deps: no nvcc: building the CPU library, CLI and tests only"
fi
