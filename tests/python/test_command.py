# SPDX-License-Identifier: Apache-2.0
"""The `pasa` command that the package installs: `python -m pasa` and the console script run the
bundled C++ CLI, pass its exit code through, and find this interpreter for `pasa study --plot`."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

from pasa import __main__ as command

pytestmark = pytest.mark.skipif(
    not command.executable().is_file(),
    reason="this build has no bundled CLI (built with PASA_BUILD_CLI=OFF)",
)


def run(*args):
    return subprocess.run([sys.executable, "-m", "pasa", *args], capture_output=True, text=True)


def test_python_m_pasa_runs_the_cli():
    r = run("beta")
    assert r.returncode == 0, r.stderr
    assert "| 0.984375 | 0.984497 |" in r.stdout  # the PASA paper's Table 3, fp16 with s2 = 128


def test_exit_codes_and_errors_pass_through():
    r = run("beta", "--block", "12x")
    assert r.returncode == 2
    assert "--block: '12x' is not an integer" in r.stderr
    r = run("--help")
    assert r.returncode == 0 and "calibrate" in r.stdout


def test_console_script_is_installed():
    script = shutil.which("pasa", path=os.path.dirname(sys.executable))
    if script is None:
        pytest.skip(f"no `pasa` script beside {sys.executable} (package not installed by pip here)")
    r = subprocess.run([script, "beta", "--init", "0.9"], capture_output=True, text=True)
    assert r.returncode == 0 and "| 0.900000 | 0.899708 |" in r.stdout, r.stderr


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
