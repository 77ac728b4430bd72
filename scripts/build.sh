#!/usr/bin/env bash
# Installs the dependencies and builds pasa (library, `pasa` CLI, tests) into build/.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
cmake --preset default
cmake --build --preset default -j "$(nproc)"
