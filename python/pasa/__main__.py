# SPDX-License-Identifier: Apache-2.0
"""The `pasa` command: runs the C++ CLI that ships inside the package (`pasa --help`).

Both the `pasa` console script and `python -m pasa` land here and become the C++ tool (exec), so that
signals (Ctrl-C, a scheduler's SIGTERM) and the exit code are the tool's own, as docs/api.md says. The
interpreter's own directory goes first on PATH, so `pasa study --plot` draws its figures with this
environment's Python (matplotlib).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pasa


def candidates() -> list[Path]:
    """Where the bundled `pasa` binary may be: bin/ in each directory of the package.

    An installed package is one directory; an editable install spans the source tree and the
    directory that holds the built files (the extension and bin/), so every one is searched.
    """
    return [Path(directory) / "bin" / "pasa" for directory in pasa.__path__]


def executable() -> Path:
    """Path of the bundled `pasa` binary (the first candidate when none exists)."""
    paths = candidates()
    return next((path for path in paths if path.is_file()), paths[0])


def main(argv: list[str] | None = None) -> int:
    """Runs the tool: in place of this process for the command line (argv None; returns only if it is
    missing), as a child whose exit code is returned for a caller that passes argv."""
    args = sys.argv[1:] if argv is None else argv
    binary = executable()
    if not binary.is_file():
        where = ", ".join(str(path) for path in candidates())
        sys.stderr.write(f"pasa: the command-line tool is missing from this installation ({where})\n")
        return 2
    env = dict(os.environ)
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    if argv is None and hasattr(os, "execve"):
        sys.stdout.flush()
        sys.stderr.flush()
        os.execve(binary, [str(binary), *args], env)
    return subprocess.run([str(binary), *args], env=env).returncode


if __name__ == "__main__":
    sys.exit(main())
