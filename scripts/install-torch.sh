#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Installs torch from PyPI into the project's .venv for the torch tests (scripts/test.sh with
# PASA_TEST_TORCH=1). Its wheel brings about 4 GB of CUDA libraries, and pip downloads every package of
# a request before it installs any, so they go in one at a time (the versions pip resolves for torch,
# each without its dependencies), without pip's cache, and with pip's temporary files under build/
# rather than in a /tmp that may be small: the disk then holds the installed packages and one
# download. Where it has too little free space even for that, torch is not installed, the torch tests
# skip (and say so), and this says why.
set -euo pipefail
cd "$(dirname "$0")/.."
py=.venv/bin/python
if "$py" -c "import torch" 2> /dev/null; then exit 0; fi
need_gb=7
free_gb=$(df -Pk . | awk 'NR == 2 {print int($4 / 1048576)}')
if [ "$free_gb" -lt "$need_gb" ]; then
  echo "install-torch: $free_gb GB free on this disk, torch needs about $need_gb GB: not installed, so the torch tests skip"
  exit 0
fi
export TMPDIR="$PWD/build/pip-tmp"
mkdir -p "$TMPDIR"
trap 'rm -rf "$TMPDIR"' EXIT
report="$TMPDIR/torch-report.json"
"$py" -m pip install -q --no-cache-dir --dry-run --report "$report" torch
"$py" - "$report" > "$TMPDIR/pins.txt" << 'EOF'
import json, sys
for item in json.load(open(sys.argv[1]))["install"]:
    print(f"{item['metadata']['name']}=={item['metadata']['version']}")
EOF
echo "install-torch: $(wc -l < "$TMPDIR/pins.txt") packages, one at a time"
while read -r pin; do
  "$py" -m pip install -q --no-cache-dir --no-deps "$pin"
done < "$TMPDIR/pins.txt"
