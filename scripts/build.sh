#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Installs the dependencies and builds pasa (library, `pasa` CLI, tests) into build/.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
# The CLI test and `pasa study --plot` run Python: the project's .venv, not the system's.
cmake --preset default -DPython3_EXECUTABLE="$PWD/.venv/bin/python"
cmake --build --preset default -j "$(nproc)"
