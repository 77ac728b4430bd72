# SPDX-License-Identifier: Apache-2.0
"""The `pasa` command that the package installs: `python -m pasa` and the console script run the
bundled C++ CLI, pass its exit code through, find this interpreter for `pasa study --plot`, and find
the binary in an editable install too."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time

import pytest

import pasa
from pasa import __main__ as command

needs_cli = pytest.mark.skipif(
    not command.executable().is_file(),
    reason="this build has no bundled CLI (built with PASA_BUILD_CLI=OFF)",
)


def run(*args):
    return subprocess.run([sys.executable, "-m", "pasa", *args], capture_output=True, text=True)


@needs_cli
def test_python_m_pasa_runs_the_cli():
    r = run("beta")
    assert r.returncode == 0, r.stderr
    assert "| 0.984375 | 0.984497 |" in r.stdout  # the PASA paper's Table 3, fp16 with s2 = 128


@needs_cli
def test_exit_codes_and_errors_pass_through():
    r = run("beta", "--block", "12x")
    assert r.returncode == 2
    assert "--block: '12x' is not an integer" in r.stderr
    r = run("--help")
    assert r.returncode == 0 and "calibrate" in r.stdout


@needs_cli
def test_console_script_is_installed():
    script = shutil.which("pasa", path=os.path.dirname(sys.executable))
    if script is None:
        pytest.skip(f"no `pasa` script beside {sys.executable} (package not installed by pip here)")
    r = subprocess.run([script, "beta", "--init", "0.9"], capture_output=True, text=True)
    assert r.returncode == 0 and "| 0.900000 | 0.899708 |" in r.stdout, r.stderr


@needs_cli
@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="reads /proc")
def test_the_command_becomes_the_cli_process():
    # exec, not a child process: a SIGTERM (a scheduler's, `timeout`'s) or Ctrl-C sent to `pasa` reaches
    # the tool itself, which cleans up and exits with its own code; nothing is left running.
    binary = os.path.realpath(command.executable())
    p = subprocess.Popen([sys.executable, "-m", "pasa", "study", "--seq", "4096"], stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL)
    exe, ignored = "", None
    try:
        deadline = time.monotonic() + 30
        while exe != binary and p.poll() is None and time.monotonic() < deadline:
            try:
                exe = os.readlink(f"/proc/{p.pid}/exe")
                if exe == binary:
                    with open(f"/proc/{p.pid}/status") as status:
                        ignored = next(int(line.split()[1], 16) for line in status if line.startswith("SigIgn:"))
            except OSError:
                pass
            time.sleep(0.02)
    finally:
        p.terminate()
        p.wait(timeout=60)
    assert exe == binary
    assert p.returncode != 0
    # The tool ignores SIGPIPE (13) and SIGXFSZ (25) itself as it starts, to report a write to a closed
    # pipe or past `ulimit -f` after writing its files, whatever the launcher handed on.
    assert ignored is not None and ignored & (1 << (13 - 1)) and ignored & (1 << (25 - 1))


@needs_cli
def test_plots_use_this_interpreter(tmp_path):
    # `pasa study --plot` runs `python3` for matplotlib; with nothing else on PATH it must still find
    # the interpreter that runs the package.
    pytest.importorskip("matplotlib")
    if not os.path.exists(os.path.join(os.path.dirname(sys.executable), "python3")):
        pytest.skip(f"no python3 beside {sys.executable}")
    env = dict(os.environ, PATH="/nonexistent")
    r = subprocess.run([sys.executable, "-m", "pasa", "study", "--seq", "32", "--heads", "1", "--policy", "exact",
                        "--plot", str(tmp_path)], capture_output=True, text=True, env=env)
    assert r.returncode == 0, r.stderr
    assert any(p.suffix == ".png" for p in tmp_path.iterdir()), r.stderr


def test_binary_is_found_in_any_package_directory(tmp_path, monkeypatch):
    # An editable install: the sources in one directory, the built files (bin/pasa) in another.
    sources, built = tmp_path / "src", tmp_path / "built"
    (built / "bin").mkdir(parents=True)
    sources.mkdir()
    (built / "bin" / "pasa").write_text("")
    monkeypatch.setattr(pasa, "__path__", [str(sources), str(built)])
    assert command.executable() == built / "bin" / "pasa"


def test_missing_binary_is_reported(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(pasa, "__path__", [str(tmp_path)])
    assert command.main(["--version"]) == 2
    err = capsys.readouterr().err
    assert "the command-line tool is missing from this installation" in err
    assert str(tmp_path / "bin" / "pasa") in err
