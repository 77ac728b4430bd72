# SPDX-License-Identifier: Apache-2.0
"""The `pasa` command under hostile conditions, through the binary: exit codes, memory limits, full
disks, interrupted writes, outputs that alias inputs, and the bad inputs that used to crash or hang.

Usage: test_cli_reliability.py PATH_TO_PASA   (run by CTest; needs python3 with numpy; Linux)
"""
import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import numpy as np

PASA = sys.argv[1]
SEED = 20261123
print(f"seed {SEED}")
RNG = np.random.default_rng(SEED)

RUNTIME_FAILURE, BAD_INPUT = 1, 2


def limits(address_space=None, file_size=None, xfsz_default=False):
    """A preexec_fn applying an address-space limit (ulimit -v) and/or a file-size limit; with the
    latter SIGXFSZ is ignored, so an oversized write fails with EFBIG as on a full disk, unless
    xfsz_default (a shell's `ulimit -f`: the signal would kill the process)."""
    def apply():
        if address_space is not None:
            resource.setrlimit(resource.RLIMIT_AS, (address_space, address_space))
        if file_size is not None:
            signal.signal(signal.SIGXFSZ, signal.SIG_DFL if xfsz_default else signal.SIG_IGN)
            resource.setrlimit(resource.RLIMIT_FSIZE, (file_size, file_size))
    return apply


def pasa(*args, code=0, timeout=120, env=None, stdin=None, **limit):
    r = subprocess.run([PASA, *args], capture_output=True, text=True, timeout=timeout, stdin=stdin,
                       env=None if env is None else {**os.environ, **env},
                       preexec_fn=limits(**limit) if limit else None)
    assert r.returncode == code, (f"pasa {' '.join(args)}: exit {r.returncode}, expected {code}\n"
                                  f"{r.stdout}\n{r.stderr}")
    if code != 0:  # one clear line, never an abort or a signal
        assert r.stderr.strip().splitlines()[-1].startswith("pasa: error:") or "--help" in r.stderr, r.stderr
    return r


def save_qkv(directory, shape=(1, 2, 16, 16), dtype=np.float32, prefix=""):
    paths = []
    for n in "qkv":
        path = os.path.join(directory, f"{prefix}{n}.npy")
        np.save(path, RNG.standard_normal(shape).astype(dtype))
        paths.append(path)
    return paths


def leftovers(directory):
    return [f for f in os.listdir(directory) if ".tmp-" in f]


def check_exit_codes(tmp):
    assert pasa("--help").stdout.startswith("pasa")
    pasa(code=BAD_INPUT)                                    # no subcommand
    pasa("run", "--no-such-option", code=BAD_INPUT)         # CLI11's errors are usage errors
    pasa("inspect", "--block", "x", code=BAD_INPUT)
    r = pasa("run", "--q", os.path.join(tmp, "missing.npy"), "--k", "k", "--v", "v", code=BAD_INPUT)
    assert "missing.npy" in r.stderr
    r = pasa("study", "--heads", "-1", code=BAD_INPUT)
    assert "--heads: -1 is not a positive count" in r.stderr, r.stderr


GIB = 1 << 30


def check_memory_limits():
    # Each asks for far more memory than a 2 GiB address space holds: a clear error, exit 1.
    for args in (("study", "--seq", "10000000000000"), ("study", "--heads", "1000000000000"),
                 ("inspect", "--seq", "1000000000000"), ("study", "sage", "--seq", "10000000000"),
                 ("study", "decode", "--seq-kv", "10000000000")):
        r = pasa(*args, code=RUNTIME_FAILURE, address_space=2 * GIB)
        assert "of memory, only" in r.stderr, r.stderr


def check_memory_before_outputs(tmp):
    # A header may claim any shape: a head dim of 0 with 2^40 queries is refused as bad input before
    # the outputs (o, and an LSE of 2^40 floats) are allocated, not as out of memory.
    q = os.path.join(tmp, "zq.npy")
    np.save(q, np.zeros((1, 1, 2**40, 0), np.float32))
    _, k, v = save_qkv(tmp, shape=(1, 1, 4, 8))
    r = pasa("run", "--q", q, "--k", k, "--v", v, code=BAD_INPUT, address_space=2 * GIB)
    assert "head dim size is 0" in r.stderr, r.stderr


def check_many_threads_in_a_small_address_space(tmp):
    # A machine of many cores under `ulimit -v` (a login node): 64 OpenMP threads' stacks (8 MiB
    # each) do not fit in 400 MB, and libgomp ended the process when it could not create one. The
    # team is cut to what fits; the run completes.
    q, k, v = save_qkv(tmp, shape=(1, 2, 64, 16))
    pasa("run", "--q", q, "--k", k, "--v", v, env={"OMP_NUM_THREADS": "64"}, address_space=400 * 10**6)


def check_a_reader_that_stops_early(tmp):
    # `pasa run ... | head -1`: the reader gone, SIGPIPE killed pasa (exit 141, no word) at its next
    # report line, after the work and before the outputs, and with --out /dev/stdout left --lse's
    # temporary behind. Now the files are written and the failed write to stdout is exit 1; where
    # --out is standard output, the outputs are written together or not at all: no --lse then.
    q, k, v = save_qkv(tmp, shape=(1, 2, 256, 64))
    out, lse = os.path.join(tmp, "o.npy"), os.path.join(tmp, "l.npy")
    for target in (out, "/dev/stdout"):
        p = subprocess.Popen([PASA, "run", "--q", q, "--k", k, "--v", v, "--out", target, "--lse", lse],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             preexec_fn=lambda: signal.signal(signal.SIGPIPE, signal.SIG_DFL))
        p.stdout.close()  # (the reader is gone before the first line)
        stderr = p.communicate(timeout=120)[1].decode()
        assert p.returncode == RUNTIME_FAILURE, f"exit {p.returncode}\n{stderr}"
        assert stderr.strip().splitlines()[-1].startswith("pasa: error:"), stderr
        assert os.path.exists(lse) == (target == out) and leftovers(tmp) == [], (os.listdir(tmp), stderr)
        if target == out:
            assert np.load(out).shape == (1, 2, 256, 64)
            os.remove(lse)


def check_a_user_process_limit(tmp):
    # ulimit -u counts every thread of the user's: libgomp ended the process ("Thread creation
    # failed", its own message) when the team's threads passed it. The team is cut to the threads
    # that start. (The limit holds for users but root: run as nobody where this runs as root.)
    if os.geteuid() != 0 or not hasattr(os, "setresuid") or not os.path.isdir("/tmp"):
        print("check_a_user_process_limit: skipped (needs root, to run as another user, and /tmp)")
        return
    tmp = tempfile.mkdtemp(dir="/tmp")  # (where nobody can reach it, whatever TMPDIR is)
    q, k, v = save_qkv(tmp, shape=(1, 2, 64, 16))
    binary = os.path.join(tmp, "pasa")  # (a copy nobody can reach: the build tree may be private)
    shutil.copy(PASA, binary)
    os.chmod(tmp, 0o777)
    for path in (q, k, v, binary):
        os.chmod(path, 0o755)

    def as_nobody_with_few_processes():
        os.setgroups([])
        os.setresgid(65534, 65534, 65534)
        os.setresuid(65534, 65534, 65534)
        resource.setrlimit(resource.RLIMIT_NPROC, (2, 2))

    r = subprocess.run([binary, "run", "--q", q, "--k", k, "--v", v, "--out", os.path.join(tmp, "o.npy")],
                       capture_output=True, text=True, timeout=120, env={**os.environ, "OMP_NUM_THREADS": "8"},
                       preexec_fn=as_nobody_with_few_processes)
    shutil.rmtree(tmp)
    assert r.returncode == 0, f"exit {r.returncode}\n{r.stderr}"


def check_full_disk(tmp):
    inputs = os.path.join(tmp, "cal")
    os.makedirs(inputs)
    for layer in range(2):
        save_qkv(inputs, shape=(1, 1, 64, 64), dtype=np.float16, prefix=f"layer{layer}_")
    r = pasa("calibrate", "--inputs", inputs, "--out", "/dev/full", code=RUNTIME_FAILURE)
    assert "/dev/full: write failed" in r.stderr and "wrote" not in r.stdout, r.stdout + r.stderr
    # A write cut short (a file-size limit stands in for a full disk) keeps the old file whole.
    q, k, v = save_qkv(tmp, shape=(1, 2, 256, 64))
    out = os.path.join(tmp, "o.npy")
    with open(out, "w") as f:
        f.write("old output")
    r = pasa("run", "--q", q, "--k", k, "--v", v, "--out", out, code=RUNTIME_FAILURE,
             file_size=64 * 1024)
    assert "write failed" in r.stderr and "the file was not changed" in r.stderr, r.stderr
    assert open(out).read() == "old output"
    plan = os.path.join(tmp, "plan.json")
    with open(plan, "w") as f:
        f.write("old plan")
    pasa("calibrate", "--inputs", inputs, "--out", plan, code=RUNTIME_FAILURE, file_size=16)
    assert open(plan).read() == "old plan"
    # The same under a shell's `ulimit -f`, where SIGXFSZ would kill the process mid-write.
    r = pasa("run", "--q", q, "--k", k, "--v", v, "--out", out, code=RUNTIME_FAILURE,
             file_size=64 * 1024, xfsz_default=True)
    assert "write failed (File too large)" in r.stderr and open(out).read() == "old output", r.stderr
    assert leftovers(tmp) == [] and leftovers(inputs) == []


def check_aliases(tmp):
    q, k, v = save_qkv(tmp)
    original = open(q, "rb").read()
    same = os.path.join(tmp, "same.npy")
    r = pasa("run", "--q", q, "--k", k, "--v", v, "--out", same, "--lse", same, code=BAD_INPUT)
    assert "--lse" in r.stderr and "same file as --out" in r.stderr, r.stderr
    assert not os.path.exists(same)
    # The same file under other names: a relative spelling, a symbolic link, a hard link.
    os.symlink(q, os.path.join(tmp, "q_link.npy"))
    os.link(q, os.path.join(tmp, "q_hard.npy"))
    spellings = (os.path.join(tmp, "sub", "..", "q.npy"), os.path.join(tmp, "q_link.npy"),
                 os.path.join(tmp, "q_hard.npy"))
    os.makedirs(os.path.join(tmp, "sub"))
    for alias in spellings:
        r = pasa("run", "--q", q, "--k", k, "--v", v, "--out", alias, code=BAD_INPUT)
        assert "same file as --q" in r.stderr, r.stderr
    assert open(q, "rb").read() == original
    inputs = os.path.join(tmp, "cal_alias")
    os.makedirs(inputs)
    capture = save_qkv(inputs, shape=(1, 1, 32, 64), dtype=np.float16, prefix="layer0_")[0]
    before = open(capture, "rb").read()
    r = pasa("calibrate", "--inputs", inputs, "--out", capture, code=BAD_INPUT)
    assert "same file as --inputs" in r.stderr, r.stderr
    assert open(capture, "rb").read() == before


def check_outputs_before_work(tmp):
    start = time.monotonic()
    r = pasa("study", "--full", "--json", "/nonexistent/x.json", code=BAD_INPUT)
    assert time.monotonic() - start < 10 and "does not exist" in r.stderr, r.stderr
    assert "study time" not in r.stdout
    q, k, v = save_qkv(tmp)
    ok = os.path.join(tmp, "ok.npy")
    pasa("run", "--q", q, "--k", k, "--v", v, "--out", ok, "--lse", "/nonexistent/l.npy", code=BAD_INPUT)
    assert not os.path.exists(ok)
    start = time.monotonic()
    r = pasa("study", "--plot", os.path.join(q, "figures"), code=BAD_INPUT)  # under a file
    assert "--plot" in r.stderr and "study time" not in r.stdout, r.stderr
    r = pasa("study", "sage", "--json", tmp, code=BAD_INPUT)  # a directory
    assert "is a directory" in r.stderr, r.stderr
    r = pasa("study", "decode", "--json", os.path.join(q, "d.json"), code=BAD_INPUT)
    assert "q.npy is not a directory" in r.stderr, r.stderr
    assert time.monotonic() - start < 10, "the outputs were checked only after the studies ran"
    # A name longer than the file system takes (its temporary's is cut short, and passed), and a
    # descriptor of this process opened for reading only: refused before the work.
    long_name = os.path.join(tmp, "a" * 252 + ".npy")
    r = pasa("run", "--q", q, "--k", k, "--v", v, "--out", long_name, code=BAD_INPUT)
    assert "File name too long" in r.stderr and "time" not in r.stdout, r.stdout + r.stderr
    with open(os.devnull, "rb") as read_only:  # (a shell's `< /dev/null`)
        r = pasa("run", "--q", q, "--k", k, "--v", v, "--out", "/dev/fd/0", code=BAD_INPUT, stdin=read_only)
    assert "/dev/fd/0: cannot open for writing" in r.stderr and "time" not in r.stdout, r.stderr


def check_inspect(tmp):
    q = os.path.join(tmp, "iq.npy")
    np.save(q, RNG.standard_normal((1, 2, 8, 16)).astype(np.float32))
    k0 = os.path.join(tmp, "ik0.npy")
    np.save(k0, np.zeros((1, 0, 8, 16), np.float32))
    r = pasa("inspect", "--q", q, "--k", k0, code=BAD_INPUT, timeout=20)
    assert "--k: heads size is 0" in r.stderr, r.stderr
    for block in ("0", "-5"):
        r = pasa("inspect", "--block", block, "--seq", "64", code=BAD_INPUT, timeout=20)
        assert "--block" in r.stderr, r.stderr
    bad = RNG.standard_normal((1, 2, 8, 16)).astype(np.float32)
    bad[0, 1, 3, 4] = np.nan
    kn = os.path.join(tmp, "ikn.npy")
    np.save(kn, bad)
    r = pasa("inspect", "--q", q, "--k", kn, code=BAD_INPUT)
    assert "--k: non-finite value nan" in r.stderr, r.stderr


def check_huge_files(tmp):
    # 6 GiB of junk named .npy (sparse: no disk used), under a 1 GiB address space: rejected from
    # its first bytes. And a valid header declaring more data than the file has: rejected before
    # any data is read.
    junk = os.path.join(tmp, "junk.npy")
    with open(junk, "wb") as f:
        f.truncate(6 * GIB)
    q, k, v = save_qkv(tmp)
    start = time.monotonic()
    r = pasa("run", "--q", junk, "--k", k, "--v", v, code=BAD_INPUT, address_space=GIB)
    assert "bad magic" in r.stderr and time.monotonic() - start < 10, r.stderr
    header = b"{'descr': '<f4', 'fortran_order': False, 'shape': (1, 64, 1048576, 128), }"
    header += b" " * (117 - len(header)) + b"\n"
    liar = os.path.join(tmp, "liar.npy")
    with open(liar, "wb") as f:
        f.write(b"\x93NUMPY\x01\x00" + len(header).to_bytes(2, "little") + header)
        f.truncate(GIB)
    r = pasa("run", "--q", liar, "--k", k, "--v", v, code=BAD_INPUT, address_space=GIB)
    assert "truncated data" in r.stderr, r.stderr
    # A zero-size tensor names its empty dimension.
    empty = os.path.join(tmp, "empty.npy")
    np.save(empty, np.zeros((1, 2, 0, 16), np.float32))
    r = pasa("run", "--q", empty, "--k", k, "--v", v, code=BAD_INPUT)
    assert "sequence size is 0" in r.stderr, r.stderr


def check_scale(tmp):
    q, k, v = save_qkv(tmp)
    r = pasa("run", "--q", q, "--k", k, "--v", v, "--scale", "1e300", code=BAD_INPUT)
    assert "scale: 1e+300 is outside" in r.stderr, r.stderr


def check_calibrate_inputs(tmp):
    inputs = os.path.join(tmp, "cal_names")
    os.makedirs(inputs)
    save_qkv(inputs, shape=(1, 1, 32, 64), dtype=np.float16, prefix="layer1_")
    save_qkv(inputs, shape=(1, 1, 32, 64), dtype=np.float16, prefix="layer01_")
    r = pasa("calibrate", "--inputs", inputs, "--out", os.path.join(tmp, "p.json"), code=BAD_INPUT)
    assert "layer01 and layer1 name the same layer and timestep" in r.stderr, r.stderr
    nan_inputs = os.path.join(tmp, "cal_nan")
    os.makedirs(nan_inputs)
    k = save_qkv(nan_inputs, shape=(1, 1, 32, 64), dtype=np.float16, prefix="layer0_")[1]
    bad = np.load(k)
    bad[0, 0, 5, 7] = np.nan
    np.save(k, bad)
    r = pasa("calibrate", "--inputs", nan_inputs, "--phi", code=BAD_INPUT)
    assert "layer0: k: non-finite value nan" in r.stderr, r.stderr


def phi_range(stdout):
    """(lo, hi) from "scaled scores of N entries: 99.98% within [lo, hi]"."""
    text = stdout.split("within [")[1].split("]")[0]
    return tuple(float(x) for x in text.split(","))


def check_phi_quantiles(tmp):
    # The streamed quantiles against numpy's exact ones: the histogram's buckets are 2^-8 of a
    # binade wide (midpoint error at most 2^-9 relative) and the range is printed to 4 significant
    # digits (5e-4 relative).
    inputs = os.path.join(tmp, "cal_small")
    os.makedirs(inputs)
    scores = []
    for layer in range(3):
        q, k, _ = (np.load(p) for p in save_qkv(inputs, shape=(1, 2, 256, 16), dtype=np.float16,
                                                  prefix=f"layer{layer}_"))
        scores.append(np.einsum("bhqd,bhkd->bhqk", q.astype(np.float64), k.astype(np.float64)).ravel() / 4.0)
    values = np.sort(np.concatenate(scores))
    n = values.size
    expected = values[int(0.0001 * (n - 1))], values[int(0.9999 * (n - 1))]
    got = phi_range(pasa("calibrate", "--inputs", inputs, "--phi").stdout)
    for g, e in zip(got, expected):
        assert abs(g - e) <= (2.0 ** -9 + 5e-4) * abs(e), (got, expected)


def check_phi_of_empty_scores(tmp):
    # A head dim of 0 has no scores to calibrate (phi came out of none), and a query length of 0 no
    # rows: refused as bad input, naming the capture.
    for shape in ((1, 1, 4, 0), (1, 1, 0, 8)):
        inputs = os.path.join(tmp, f"cal_{shape[2]}_{shape[3]}")
        os.makedirs(inputs)
        for n in "qkv":
            np.save(os.path.join(inputs, f"layer0_{n}.npy"), np.zeros(shape, np.float16))
        r = pasa("calibrate", "--inputs", inputs, "--phi", code=BAD_INPUT)
        assert "layer0" in r.stderr and "every size must be at least 1" in r.stderr, r.stderr


def check_phi_in_bounded_memory(tmp):
    # Twelve captures whose scores (12 x 4 x 2048 x 2048 doubles = 1.5 GiB) exceed a 1 GiB address
    # space, while each capture alone is small: --phi must stream them.
    inputs = os.path.join(tmp, "cal_big")
    os.makedirs(inputs)
    for layer in range(12):
        save_qkv(inputs, shape=(1, 4, 2048, 16), dtype=np.float16, prefix=f"layer{layer}_")
    r = pasa("calibrate", "--inputs", inputs, "--phi", address_space=GIB, timeout=300)
    assert "policy: fdpp,phi=" in r.stdout, r.stdout


def check_sigint_during_write(tmp):
    # `pasa run` writing a large output: SIGINT (or SIGTERM, SIGHUP, SIGQUIT) as soon as its temporary
    # file appears must leave the old output intact and remove the temporary.
    k, v = save_qkv(tmp, shape=(1, 1, 1, 16), prefix="w")[1:]
    q = os.path.join(tmp, "wq.npy")  # (after save_qkv, which writes a small wq.npy of its own)
    np.save(q, RNG.standard_normal((1, 1, 1 << 21, 16)).astype(np.float32))  # 128 MiB
    out = os.path.join(tmp, "wo.npy")
    signals = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)

    def defaults():  # (a background job inherits SIGINT and SIGQUIT ignored, nohup SIGHUP)
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # (SIGQUIT dumps one)
        for s in signals:
            signal.signal(s, signal.SIG_DFL)
    for sig in signals:
        # On a fast machine the write can end between seeing its temporary and the signal landing:
        # then the new output is complete and nothing is left behind; try again, a few times.
        for attempt in range(5):
            with open(out, "w") as f:
                f.write("old output")
            p = subprocess.Popen([PASA, "run", "--q", q, "--k", k, "--v", v, "--out", out],
                                 stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, preexec_fn=defaults)
            deadline = time.monotonic() + 240
            while not leftovers(tmp) and p.poll() is None and time.monotonic() < deadline:
                time.sleep(0.0005)
            p.send_signal(sig)
            p.wait(timeout=60)
            assert leftovers(tmp) == [], f"temporary left behind: {leftovers(tmp)}"
            if p.returncode == 0:
                assert np.load(out).shape == (1, 1, 1 << 21, 16), "the finished output is incomplete"
                continue
            assert p.returncode == -sig, f"{sig!r}: exit {p.returncode}"
            assert open(out).read() == "old output", "the old output was lost"
            break
        else:
            raise AssertionError(f"{sig!r}: the write finished before the signal in 5 attempts")


def first_progress_line(stderr):
    """The first case's progress line of `pasa study`, past the lines a slow case prints while it runs
    ("pasa: case 1/22 (...): still running (10 s)")."""
    line = stderr.readline()
    while line.startswith("pasa: case ") and "still running" in line:
        line = stderr.readline()
    return line


def check_study_stops_on_ctrl_c(tmp):
    # The first Ctrl-C stops `pasa study` at the emulator's next poll: the cases it finished are
    # printed (the rest "not run"), one error line says so, the exit status is 130, --json is not
    # written. (SIGINT reset to its default: a background job of a shell inherits it ignored.)
    out = os.path.join(tmp, "s.json")
    p = subprocess.Popen([PASA, "study", "--json", out], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    first = first_progress_line(p.stderr)  # at least one case has finished
    assert first.startswith("[ 1/22]"), first
    p.send_signal(signal.SIGINT)
    stdout, stderr = p.communicate(timeout=60)
    assert p.returncode == 130, f"exit {p.returncode}\n{stderr}"
    assert "pasa: error: interrupted (Ctrl-C) after" in stderr and "--json not written" in stderr, stderr
    assert "not run" in stdout and not os.path.exists(out) and leftovers(tmp) == [], stdout
    # The finished cases' rows hold numbers: Table 4's first case, uniform x0 = 30 Am = 0.5, ran first.
    assert any(line.startswith("| uniform | 30 | 0.5 |") and "not run" not in line
               for line in stdout.splitlines()), stdout
    # With standard output full (or a pipe whose reader the Ctrl-C ended too), the rows it would say
    # are above are not: both the interruption and the failed write are told, exit 130.
    with open("/dev/full", "w") as full:
        p = subprocess.Popen([PASA, "study"], stdout=full, stderr=subprocess.PIPE, text=True,
                             preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
        assert first_progress_line(p.stderr).startswith("[ 1/22]")
        p.send_signal(signal.SIGINT)
        stderr = p.communicate(timeout=60)[1]
    assert p.returncode == 130, f"exit {p.returncode}\n{stderr}"
    assert "interrupted (Ctrl-C) after" in stderr and "writing to standard output failed" in stderr, stderr
    assert "rows are above" not in stderr, stderr


def check_plot_folder_goes_with_a_signal(tmp):
    # A --plot folder the command made is removed (while still empty) when a signal ends the command,
    # as a failure removes it; a folder that was there before stays. (A python3 that imports anything
    # stands in for one with matplotlib: the command ends before it draws.)
    fake = os.path.join(tmp, "bin")
    os.makedirs(fake)
    with open(os.path.join(fake, "python3"), "w") as f:
        f.write("#!/bin/sh\nexit 0\n")
    os.chmod(os.path.join(fake, "python3"), 0o755)
    env = dict(os.environ, PATH=fake + os.pathsep + os.environ["PATH"])
    kept = os.path.join(tmp, "kept")
    os.makedirs(kept)
    for command, sig, plots in ((("study",), signal.SIGTERM, "made"), (("study",), signal.SIGHUP, "made"),
                                (("study", "sage"), signal.SIGINT, "made"), (("study", "sage"), signal.SIGTERM, "made"),
                                (("study",), signal.SIGINT, "made"), (("study", "sage"), signal.SIGTERM, "kept")):
        folder = os.path.join(tmp, plots)
        p = subprocess.Popen([PASA, *command, "--plot", folder], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                             text=True, env=env, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
        deadline = time.monotonic() + 30
        while not os.path.isdir(folder) and p.poll() is None and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(0.5)  # (into the study)
        assert p.poll() is None, p.communicate()
        p.send_signal(sig)
        stderr = p.communicate(timeout=60)[1]
        assert p.returncode in (-sig, 130), f"{command} {sig}: exit {p.returncode}\n{stderr}"
        assert os.path.isdir(folder) == (plots == "kept"), (command, sig, os.listdir(tmp))


def check_outputs_on_the_standard_streams(tmp):
    # An output that is the file standard error or standard output is open on holds the file alone:
    # the progress lines went into `--json /dev/stderr 2> f`, the report into `--out /dev/stdout > f
    # 2>&1`, and the files did not load.
    q, k, v = save_qkv(tmp)
    for out, merged in (("/dev/stderr", False), ("/dev/stdout", True)):
        path = os.path.join(tmp, "o.npy")
        with open(path, "wb") as f:
            r = subprocess.run([PASA, "run", "--q", q, "--k", k, "--v", v, "--out", out], timeout=120,
                               stdout=f if out == "/dev/stdout" else subprocess.PIPE,
                               stderr=subprocess.STDOUT if merged else f)
        assert r.returncode == 0, r
        assert np.load(path).shape == (1, 2, 16, 16), out
    path = os.path.join(tmp, "d.json")
    with open(path, "wb") as f:
        r = subprocess.run([PASA, "study", "decode", "--seq-kv", "64", "--batch", "1", "--json", "/dev/stderr"],
                           stdout=subprocess.PIPE, stderr=f, timeout=120)
    assert r.returncode == 0, r
    with open(path) as f:
        assert len(json.load(f)) > 0


def main():
    checks = (check_exit_codes, check_memory_limits, check_memory_before_outputs,
              check_many_threads_in_a_small_address_space, check_a_reader_that_stops_early,
              check_a_user_process_limit, check_full_disk, check_aliases,
              check_outputs_before_work, check_inspect, check_huge_files, check_scale,
              check_calibrate_inputs, check_phi_quantiles, check_phi_of_empty_scores,
              check_phi_in_bounded_memory,
              check_sigint_during_write, check_study_stops_on_ctrl_c, check_plot_folder_goes_with_a_signal,
              check_outputs_on_the_standard_streams)
    for check in checks:
        with tempfile.TemporaryDirectory() as tmp:
            start = time.monotonic()
            check(tmp) if check.__code__.co_argcount else check()
            print(f"{check.__name__}: ok ({time.monotonic() - start:.1f} s)")
    print("cli reliability tests passed")


if __name__ == "__main__":
    main()
