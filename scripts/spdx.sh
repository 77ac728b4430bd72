#!/usr/bin/env bash
# The license header convention: every source file (C++, CUDA, Python, shell, CMake, TOML) starts
# with `SPDX-License-Identifier: Apache-2.0` in its comment syntax, after a shebang line if it has one.
#   bash scripts/spdx.sh          lists the tracked source files without it and fails if there are any
#   bash scripts/spdx.sh --fix    adds it to them
set -euo pipefail
cd "$(dirname "$0")/.."
tag="SPDX-License-Identifier: Apache-2.0"
missing=0
while IFS= read -r file; do
  case "$file" in
    *.h|*.cpp|*.cu|*.cuh|*.h.in) line="// $tag" ;;
    *.py|*.pyi|*.sh|*.cmake|*.cmake.in|*CMakeLists.txt|*.toml|.ci/run) line="# $tag" ;;
    *) continue ;;
  esac
  head -n 3 "$file" | grep -q "$tag" && continue
  if [ "${1:-}" != "--fix" ]; then
    echo "no SPDX line: $file"
    missing=1
  elif head -n 1 "$file" | grep -q '^#!'; then
    sed -i "1a $line" "$file"
  else
    sed -i "1i $line" "$file"
  fi
done < <(git ls-files)
[ "${1:-}" = "--fix" ] || [ "$missing" -eq 0 ] || { echo "spdx: run bash scripts/spdx.sh --fix"; exit 1; }
