# SPDX-License-Identifier: Apache-2.0
"""End-to-end checks of the `pasa` command: run, beta, inspect, study (short), calibrate, bench,
overhead.

Usage: test_cli.py PATH_TO_PASA   (run by CTest; needs python3 with numpy)
"""
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

PASA = sys.argv[1]


def pasa(*args, ok=True):
    r = subprocess.run([PASA, *args], capture_output=True, text=True)
    if ok and r.returncode != 0:
        raise AssertionError(f"pasa {' '.join(args)} failed:\n{r.stdout}\n{r.stderr}")
    if not ok and r.returncode == 0:
        raise AssertionError(f"pasa {' '.join(args)} should have failed")
    return r


def check_run(tmp):
    rng = np.random.default_rng()
    q, k, v = (rng.standard_normal((1, 2, 33, 64)).astype(np.float32) for _ in range(3))
    for n, a in zip("qkv", (q, k, v)):
        np.save(os.path.join(tmp, f"{n}.npy"), a)
    out, lse = os.path.join(tmp, "o.npy"), os.path.join(tmp, "lse.npy")
    r = pasa("run", "--q", f"{tmp}/q.npy", "--k", f"{tmp}/k.npy", "--v", f"{tmp}/v.npy", "--causal",
             "--out", out, "--lse", lse, "--check")
    assert "relative RMSE" in r.stdout, r.stdout
    o = np.load(out)
    s = np.einsum("bhqd,bhkd->bhqk", q.astype(np.float64), k.astype(np.float64)) / 8.0
    s = np.where(np.tril(np.ones((33, 33), bool)), s, -np.inf)
    p = np.exp(s - s.max(-1, keepdims=True))
    ref = (p / p.sum(-1, keepdims=True)) @ v.astype(np.float64)
    assert np.abs(o - ref).max() < 1e-5
    ref_lse = np.log(np.exp(s - s.max(-1, keepdims=True)).sum(-1)) + s.max(-1)
    assert np.abs(np.load(lse) - ref_lse).max() < 1e-4
    r = pasa("run", "--q", f"{tmp}/q.npy", "--k", f"{tmp}/k.npy", "--v", f"{tmp}/nope.npy", ok=False)
    assert "nope.npy" in r.stderr, r.stderr
    r = pasa("run", "--q", f"{tmp}/q.npy", "--k", f"{tmp}/k.npy", "--v", f"{tmp}/v.npy", "--policy",
             "pasa,beta=2", ok=False)
    assert "beta" in r.stderr, r.stderr


def check_version_help_and_alignment(tmp):
    version = pasa("--version").stdout.split()
    assert version[0] == "pasa" and version[1].count(".") == 2, version
    help_text = pasa("run", "--help").stdout
    for preset in ("exact", "fa16_fp32", "fa16", "pasa", "sage8", "sage4", "fdpp"):
        assert preset in help_text, preset
    assert "bottom_right" in help_text and "top_left" in help_text
    # --alignment takes the API's spelling (and the hyphenated one); top_left and bottom_right
    # differ when S_q < S_kv.
    rng = np.random.default_rng(11)
    print("check_version_help_and_alignment: numpy seed 11")
    q = rng.standard_normal((1, 1, 3, 64)).astype(np.float32)
    k, v = (rng.standard_normal((1, 1, 9, 64)).astype(np.float32) for _ in range(2))
    for n, a in zip("qkv", (q, k, v)):
        np.save(os.path.join(tmp, f"a{n}.npy"), a)
    outputs = {}
    for alignment in ("top_left", "top-left", "bottom_right", "bottom-right"):
        out = os.path.join(tmp, f"o_{alignment}.npy")
        pasa("run", "--q", f"{tmp}/aq.npy", "--k", f"{tmp}/ak.npy", "--v", f"{tmp}/av.npy", "--causal",
             "--alignment", alignment, "--out", out)
        outputs[alignment] = np.load(out)
    assert np.array_equal(outputs["top_left"], outputs["top-left"])
    assert np.array_equal(outputs["bottom_right"], outputs["bottom-right"])
    assert not np.array_equal(outputs["top_left"], outputs["bottom_right"])
    r = pasa("run", "--q", f"{tmp}/aq.npy", "--k", f"{tmp}/ak.npy", "--v", f"{tmp}/av.npy",
             "--alignment", "middle", ok=False)
    assert "is not bottom_right or top_left" in r.stderr, r.stderr


def check_beta_and_inspect():
    r = pasa("beta")
    assert "| 0.984375 | 0.984497 |" in r.stdout, r.stdout
    assert "| 0.900000 | 0.899708 |" in r.stdout, r.stdout
    r = pasa("inspect", "--preset", "svd", "--seq", "256")
    assert "before yes, after no" in r.stdout, r.stdout


def check_study(tmp):
    path = os.path.join(tmp, "study.json")
    # A directory name with a quote and a space: plotting runs no shell.
    plots = os.path.join(tmp, "it's plots")
    have_matplotlib = subprocess.run(["python3", "-c", "import matplotlib"]).returncode == 0
    pasa("study", "--seq", "128", "--heads", "1", "--seed", "7", "--json", path,
         *(["--plot", plots] if have_matplotlib else []))
    if have_matplotlib:
        assert len([f for f in os.listdir(plots) if f.endswith(".png")]) == 4, os.listdir(plots)
    document = json.load(open(path))
    assert document["pasa_version"] == pasa("--version").stdout.split()[1]
    assert document["study"] == "paper" and document["seed"] == 7
    assert document["shape"] == {"batch": 1, "heads": 1, "seq": 128, "dim": 128}
    assert document["policies"] == ["exact", "fa16_fp32", "fa16", "pasa", "pasa_accurate"]
    rows = document["rows"]
    assert {r["policy"] for r in rows} == set(document["policies"])
    assert all(set(r) == {"dist", "x0", "am", "v", "policy", "nan_share", "rmse"} for r in rows)
    assert all(r["nan_share"] == 0 for r in rows if r["policy"] in ("exact", "pasa"))
    assert any(r["nan_share"] > 0 for r in rows if r["policy"] == "fa16_fp32")


def check_sage_and_decode_studies(tmp):
    path = os.path.join(tmp, "sage.json")
    pasa("study", "sage", "--seq", "64", "--heads", "1", "--json", path)
    document = json.load(open(path))
    assert document["study"] == "sage" and document["seed"] == 2024 and document["pasa_version"]
    assert document["shape"] == {"batch": 1, "heads": 1, "seq": 64, "dim": 128}
    assert {"sage8", "sage4"} <= set(document["policies"])
    rows = document["rows"]
    assert all({"table", "variant", "policy", "input", "cos_sim", "rel_l1", "rmse"} <= set(r) for r in rows)
    table4 = [r for r in rows if r["table"] == "PASA Table 4 inputs"]
    assert all(r["nan_share"] == 0 for r in table4 if r["policy"] in ("sage8", "sage4", "pasa"))
    path = os.path.join(tmp, "decode.json")
    pasa("study", "decode", "--seq-kv", "256", "--batch", "1", "--json", path)
    document = json.load(open(path))
    assert document["study"] == "decode" and document["shape"]["seq_kv"] == 256
    assert document["policies"] == ["fdpp"]
    rows = document["rows"]
    normal = next(r for r in rows if r["input"] == "normal")
    assert normal["recompute_calibrated"] == 0 and normal["unified_vs_sync"] < 1e-2, normal


def check_calibrate(tmp):
    # Ten layers of N(0, 1) inputs; layers 2 and 7 carry channel outliers that INT4 struggles with.
    rng = np.random.default_rng()
    inputs = os.path.join(tmp, "captured")
    os.makedirs(inputs)
    for layer in range(10):
        q, k, v = (rng.standard_normal((1, 2, 128, 64)).astype(np.float16) for _ in range(3))
        if layer in (2, 7):
            q[..., :4] += 40 * rng.standard_normal((1, 2, 128, 1)).astype(np.float16)
            k[..., 4:8] += 40 * rng.standard_normal((1, 2, 128, 1)).astype(np.float16)
        for n, a in zip("qkv", (q, k, v)):
            np.save(os.path.join(inputs, f"layer{layer}_t5_{n}.npy"), a)
    plan_path = os.path.join(tmp, "plan.json")
    pasa("calibrate", "--inputs", inputs, "--fast", "sage4", "--accurate", "sage8", "--xi", "20",
         "--out", plan_path)
    plan = json.load(open(plan_path))
    assert plan["pasa_version"] == pasa("--version").stdout.split()[1]
    accurate = sorted(e["layer"] for e in plan["entries"] if e["policy"] == "sage8")
    assert accurate == [2, 7], plan
    r = pasa("calibrate", "--inputs", inputs, "--phi")
    assert "policy: fdpp,phi=" in r.stdout, r.stdout
    pasa("calibrate", "--inputs", inputs, "--xi", "101", "--out", plan_path, ok=False)
    empty = os.path.join(tmp, "empty")
    os.makedirs(empty)
    r = pasa("calibrate", "--inputs", empty, "--out", plan_path, ok=False)
    assert "holds no" in r.stderr, r.stderr
    os.remove(os.path.join(inputs, "layer3_t5_v.npy"))
    r = pasa("calibrate", "--inputs", inputs, "--out", plan_path, ok=False)
    assert "layer3_t5 has 2 of its" in r.stderr, r.stderr


def check_arguments():
    # The CLI's own argument parser: help for every command, and usage errors (exit code 2) that name
    # the option and never run the command.
    r = pasa("--help")
    assert all(c in r.stdout for c in ("run", "study", "beta", "inspect", "calibrate", "bench")), r.stdout
    r = pasa("study", "--help")
    assert "--seq VALUE" in r.stdout and "[default: 1280]" in r.stdout and "sage" in r.stdout, r.stdout
    r = pasa("study", "sage", "-h")
    assert "pasa study sage" in r.stdout, r.stdout
    for args, words in ((("beta", "--block", "12x"), "--block: '12x' is not an integer"),
                        (("beta", "--nope"), "no option --nope"),
                        (("beta", "--block"), "--block needs a value"),
                        (("run", "--causal=1"), "--causal is a flag"),
                        (("calibrate",), "--inputs is required"),
                        (("frobnicate",), "'frobnicate'"),
                        ((), "needs a command: run, study")):
        r = pasa(*args, ok=False)
        assert r.returncode == 2 and words in r.stderr, (args, r.stderr)
    # A list option's values replace its default list: --init takes comma-separated values.
    r = pasa("beta", "--init", "0.9,0.99", "--init=0.999")
    initial = [line.split("|")[1].strip() for line in r.stdout.splitlines() if line.startswith("| 0.")]
    assert initial == ["0.900000", "0.990000", "0.999000"], r.stdout


def check_bench():
    # Bad options fail before any GPU work, on any machine.
    for args, words in ((("--head-dim", "80"), "64, 96, 128 or 256"), (("--runs", "0"), "--runs"),
                        (("--seq", "1000"), "divide --tokens"), (("--policy", "nonsense"), "nonsense"),
                        (("--decode-cache", "paged12"), "power of two"),
                        (("--decode-cache", "paged64", "--decode-seq", "100"), "divide every --decode-seq")):
        r = pasa("bench", *args, ok=False)
        assert r.returncode == 2 and words in r.stderr, r.stderr
    # One small point: timed where there is a GPU (sm_80 or newer), a clear error where there is none.
    r = subprocess.run([PASA, "bench", "--policy", "exact", "--dtype", "fp16", "--head-dim", "64", "--seq", "1024",
                        "--tokens", "1024", "--hidden", "128", "--mask", "full", "--no-decode", "--runs", "3",
                        "--warmup", "1"], capture_output=True, text=True)
    if r.returncode == 0:
        assert "pasa-exact" in r.stdout and "TFLOP/s" in r.stdout, r.stdout
        # A point the kernels refuse (sage8 has no head dim 96) is skipped with its reason; the rest run.
        r = pasa("bench", "--policy", "exact,sage8", "--dtype", "fp16", "--head-dim", "96", "--seq", "1024",
                 "--tokens", "1024", "--mask", "full", "--no-decode", "--runs", "3", "--warmup", "1")
        assert "pasa-exact" in r.stdout and "skipped 1 point(s)" in r.stdout and "pasa-sage8" in r.stdout, r.stdout
        # Decode on the dense tensors, a dense KV cache and a paged one, one small point each.
        r = pasa("bench", "--policy", "exact", "--seq", "1024", "--tokens", "1024", "--head-dim", "64",
                 "--dtype", "fp16", "--mask", "full", "--decode-batch", "2", "--decode-seq", "256",
                 "--decode-policy", "exact", "--decode-cache", "tensors,dense,paged16", "--runs", "3", "--warmup", "1")
        assert all(m in r.stdout for m in ("decode:exact ", "decode:exact:dense", "decode:exact:paged16")), r.stdout
    else:
        assert r.returncode == 2 and ("GPU" in r.stderr or "CUDA" in r.stderr), r.stderr


def check_overhead():
    # On the CPU emulator (one query, one key): a positive host time for each way of calling.
    r = pasa("overhead", "--device", "cpu", "--heads-q", "1", "--heads-kv", "1", "--seq-kv", "1",
             "--head-dim", "8", "--calls", "5")
    rows = [line for line in r.stdout.splitlines()
            if line.startswith("| pasa::attention") or line.startswith("| AttentionPlan::run")]
    assert len(rows) == 2 and all(float(line.split("|")[2]) > 0 for line in rows), r.stdout
    r = pasa("overhead", "--device", "tpu", ok=False)
    assert r.returncode == 2 and "--device" in r.stderr, r.stderr


def main():
    with tempfile.TemporaryDirectory() as tmp:
        check_run(tmp)
        check_version_help_and_alignment(tmp)
        check_beta_and_inspect()
        check_study(tmp)
        check_sage_and_decode_studies(tmp)
        check_calibrate(tmp)
    check_arguments()
    check_bench()
    check_overhead()
    print("cli tests passed")


if __name__ == "__main__":
    main()
