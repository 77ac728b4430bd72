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


def _prepare(args: list[str]) -> tuple[Path, list[str], dict[str, str]] | None:
    """(binary, argv, environment) of the tool, or None (said on stderr) where it is missing."""
    binary = executable()
    if not binary.is_file():
        where = ", ".join(str(path) for path in candidates())
        sys.stderr.write(f"pasa: the command-line tool is missing from this installation ({where})\n")
        return None
    env = dict(os.environ)
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    return binary, [str(binary), *args], env


def main(argv: list[str] | None = None) -> int:
    """Runs the tool as a child process and returns its exit code (2 where it is missing)."""
    prepared = _prepare(sys.argv[1:] if argv is None else argv)
    if prepared is None:
        return 2
    _, command, env = prepared
    return subprocess.run(command, env=env).returncode


def run_command() -> int:
    """The command line: becomes the tool (exec; returns 2 only where it is missing)."""
    prepared = _prepare(sys.argv[1:])
    if prepared is None:
        return 2
    binary, command, env = prepared
    if not hasattr(os, "execve"):
        return subprocess.run(command, env=env).returncode
    for stream in (sys.stdout, sys.stderr):
        if stream is not None:
            try:
                stream.flush()
            except (OSError, ValueError):  # (a closed stream: the tool reports its own writes)
                pass
    # (Python starts with SIGPIPE and SIGXFSZ ignored, and exec keeps that, as the tool has them itself.)
    os.execve(binary, command, env)
    return 2  # (not reached)


if __name__ == "__main__":
    sys.exit(run_command())
