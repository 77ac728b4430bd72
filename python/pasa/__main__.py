# SPDX-License-Identifier: Apache-2.0
"""The `pasa` command: runs the C++ CLI that ships inside the package (`pasa --help`).

Both the `pasa` console script and `python -m pasa` land here. The interpreter's own directory goes
first on PATH, so `pasa study --plot` draws its figures with this environment's Python (matplotlib).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def executable() -> Path:
    """Path of the bundled `pasa` binary."""
    return Path(__file__).resolve().parent / "bin" / "pasa"


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    binary = executable()
    if not binary.is_file():
        sys.stderr.write(f"pasa: the command-line tool is missing from this installation ({binary})\n")
        return 2
    env = dict(os.environ)
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    return subprocess.run([str(binary), *args], env=env).returncode


if __name__ == "__main__":
    sys.exit(main())
