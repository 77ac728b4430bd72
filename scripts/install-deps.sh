#!/usr/bin/env bash
# Installs what pasa's build, tests and figures need (Debian packages and PyPI). Idempotent: installs
# only what is missing. The CUDA toolkit is optional: with nvcc on the PATH the kernels are built too.
set -euo pipefail

packages=(cmake ninja-build g++ clang libomp-dev libgtest-dev libgmock-dev libbenchmark-dev
          libcli11-dev libfmt-dev nlohmann-json3-dev python3 python3-pip)
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

python_packages=(numpy pytest matplotlib scikit-build-core nanobind)
if ! python3 -c "import numpy, pytest, matplotlib, scikit_build_core, nanobind" 2>/dev/null; then
  echo "install-deps: installing Python packages ${python_packages[*]}"
  python3 -m pip install -q "${python_packages[@]}" 2>/dev/null ||
    python3 -m pip install -q --break-system-packages "${python_packages[@]}"
fi
command -v nvcc >/dev/null && echo "install-deps: nvcc found: the CUDA kernels will be built" ||
  echo "install-deps: no nvcc: building the CPU library, CLI and tests only"
