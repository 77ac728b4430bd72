#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# pasa as a CMake dependency: installs the library that build/ holds (scripts/build.sh made it), builds
# examples/cmake-consumer against it with find_package(pasa CONFIG) and runs it; then configures the
# consumer with pasa as a subdirectory and checks that only the library comes along (no CLI, no tests).
set -euo pipefail
cd "$(dirname "$0")/.."
out=build-package
rm -rf "$out"
cmake --install build --prefix "$out/prefix" > /dev/null
cmake -S examples/cmake-consumer -B "$out/installed" -G Ninja -DCMAKE_BUILD_TYPE=Release \
      -DCMAKE_PREFIX_PATH="$PWD/$out/prefix"
cmake --build "$out/installed"
"$out/installed/pasa_consumer"

cmake -S examples/cmake-consumer -B "$out/subproject" -G Ninja -DPASA_SOURCE_DIR="$PWD" \
      -DPASA_ENABLE_CUDA=OFF > /dev/null
targets=$(ninja -C "$out/subproject" -t targets all)
if grep -qE '^(pasa_cli|pasa_tests|pasa)(:| )' <<< "$targets"; then
  echo "check-cmake-package: a subproject build of pasa should not define the CLI or the tests"
  exit 1
fi
grep -q '^pasa_consumer:' <<< "$targets"
echo "cmake package: find_package(pasa) and add_subdirectory both work"
