# SPDX-License-Identifier: Apache-2.0
"""End-to-end checks of the `pasa` command: run, beta, inspect, study (short), calibrate, bench,
overhead; that docs/cli.md lists every command and option; and what each refuses: pipes as inputs,
conflicting or empty options, outputs that could not be written (checked before the work), and
outputs that change together or not at all.

Usage: test_cli.py PATH_TO_PASA   (run by CTest; needs python3 with numpy)
"""
import io
import json
import os
import re
import resource
import signal
import subprocess
import sys
import tempfile
import time

import numpy as np

PASA = sys.argv[1]


def pasa(*args, ok=True, code=None, env=None, timeout=120):
    """Runs pasa; ok=False expects a failure, code=N that exit code, which then ends in one error line."""
    r = subprocess.run([PASA, *args], capture_output=True, text=True, env=env, timeout=timeout)
    if code is not None:
        assert r.returncode == code, f"pasa {' '.join(args)}: exit {r.returncode}, expected {code}\n{r.stderr}"
        if code != 0:
            lines = r.stderr.strip().splitlines()
            assert len(lines) >= 1 and lines[-1].startswith("pasa: error: "), r.stderr
        return r
    if ok and r.returncode != 0:
        raise AssertionError(f"pasa {' '.join(args)} failed:\n{r.stdout}\n{r.stderr}")
    if not ok and r.returncode == 0:
        raise AssertionError(f"pasa {' '.join(args)} should have failed")
    return r


def save_qkv(tmp, prefix, shape=(1, 2, 16, 16)):
    rng = np.random.default_rng(5)
    paths = []
    for n in "qkv":
        paths.append(os.path.join(tmp, f"{prefix}{n}.npy"))
        np.save(paths[-1], rng.standard_normal(shape).astype(np.float32))
    return paths


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
    # Inputs of different dtypes: O in float32, which holds each (V past fp16's range gave inf in
    # Q's float16, with exit 0).
    np.save(f"{tmp}/q16.npy", q.astype(np.float16))
    np.save(f"{tmp}/v_big.npy", v * 1e5 + 1e5)
    r = pasa("run", "--q", f"{tmp}/q16.npy", "--k", f"{tmp}/k.npy", "--v", f"{tmp}/v_big.npy", "--out", out,
             "--check")
    assert "non-finite share 0.0000%" in r.stdout, r.stdout
    o = np.load(out)
    assert o.dtype == np.float32 and np.isfinite(o).all()
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
    r = pasa("run", "--q", f"{tmp}/aq.npy", "--k", f"{tmp}/ak.npy", "--v", f"{tmp}/av.npy", "--causal",
             "--alignment", "middle", ok=False)
    assert "is not bottom_right or top_left" in r.stderr, r.stderr


def check_beta_and_inspect():
    r = pasa("beta")
    assert "| 0.984375 | 0.984497 |" in r.stdout, r.stdout
    assert "| 0.900000 | 0.899708 |" in r.stdout, r.stdout
    # A format whose M cannot hold beta / s2 has no optimal beta (not "0.000000"); a tiny initial value
    # prints in full.
    r = pasa("beta", "--format", "e2m0", ok=False)
    assert "| 0.900000 | none: M's off-diagonal entries round to 0 in e2m0" in r.stdout, r.stdout
    r = pasa("beta", "--init", "1e-300", ok=False)
    assert "| 1e-300 | none:" in r.stdout, r.stdout
    # One just below 1 prints as given, not rounded to 1.000000, which --init refuses.
    r = pasa("beta", "--init", "0.99999999", ok=False)
    assert "| 0.99999999 | none:" in r.stdout, r.stdout
    # beta / (1 - beta) past the format's range is said, not printed as its rounding (nan in e4m3).
    r = pasa("beta", "--format", "e4m3", "--block", "1", "--init", "0.999")
    assert "| 511.0000 | beyond e4m3's largest value |" in r.stdout, r.stdout
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
        # Figures replace the earlier ones whole or not at all: a write cut short by a file size limit
        # left a truncated PNG in place of a good one.
        before = {f: open(os.path.join(plots, f), "rb").read() for f in os.listdir(plots) if f.endswith(".png")}
        limited = subprocess.run([PASA, "study", "--seq", "128", "--heads", "1", "--plot", plots],
                                 capture_output=True, text=True,
                                 preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (40000, 40000)))
        assert limited.returncode == 1 and "plotting script failed" in limited.stderr, limited.stderr
        after = {f: open(os.path.join(plots, f), "rb").read() for f in os.listdir(plots) if f.endswith(".png")}
        assert after == before and not [f for f in os.listdir(plots) if f.endswith(".tmp")], os.listdir(plots)
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
    # One key per K/V head, fewer than the 4 query heads a K/V head: K's draws once began among Q's own,
    # a key equal to a query (a score of 11 sigma) that sent 12.5% of the normal rows to recompute.
    pasa("study", "decode", "--seq-kv", "1", "--batch", "1", "--json", path)
    normal = next(r for r in json.load(open(path))["rows"] if r["input"] == "normal")
    assert normal["recompute_calibrated"] == 0 and normal["recompute_phi0"] == 0, normal


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
    # Any xi above 0 sends at least the worst entry to the accurate policy (1e-9% sent none).
    r = pasa("calibrate", "--inputs", inputs, "--fast", "sage4", "--accurate", "sage8", "--xi", "1e-9",
             "--out", plan_path)
    assert " 1 use sage8 " in r.stdout, r.stdout
    assert [e["layer"] for e in json.load(open(plan_path))["entries"] if e["policy"] == "sage8"] in ([2], [7])
    r = pasa("calibrate", "--inputs", inputs, "--phi")
    assert "policy: fdpp,phi=" in r.stdout, r.stdout
    pasa("calibrate", "--inputs", inputs, "--xi", "101", "--out", plan_path, ok=False)
    # A plan inside the inputs under a captured file's name would be read as one by the next run.
    inside = os.path.join(inputs, "layer99.safetensors")
    r = pasa("calibrate", "--inputs", inputs, "--fast", "sage4", "--out", inside, code=2)
    assert "has the name of captured inputs" in r.stderr and not os.path.exists(inside), r.stderr
    link = os.path.join(tmp, "plan_link.json")  # ... through a symbolic link too
    os.symlink(inside, link)
    r = pasa("calibrate", "--inputs", inputs, "--fast", "sage4", "--out", link, code=2)
    assert "has the name of captured inputs" in r.stderr and not os.path.exists(inside), r.stderr
    r = pasa("calibrate", "--inputs", os.path.join(tmp, "missing"), "--out", plan_path, ok=False)
    assert "missing does not exist" in r.stderr, r.stderr
    empty = os.path.join(tmp, "empty")
    os.makedirs(empty)
    r = pasa("calibrate", "--inputs", empty, "--out", plan_path, ok=False)
    assert "holds no" in r.stderr, r.stderr
    os.remove(os.path.join(inputs, "layer3_t5_v.npy"))
    r = pasa("calibrate", "--inputs", inputs, "--out", plan_path, ok=False)
    assert "layer3_t5 has 2 of its" in r.stderr, r.stderr


def check_calibrate_ranks_a_flipped_output_worst(tmp):
    # Under sage4, layer0's one output row comes out with fp64's opposite sign (CosSim -1, L1 1.33):
    # CosSim * (1 - L1) of two negative factors scored it +0.33, better than layer1 (CosSim 1, L1
    # 0.75: 0.25), and --xi 50 sent layer1 to the accurate policy instead.
    f32 = np.float32
    layers = {
        0: ([1.707180142402649, 0.5786142349243164, 0.37289533019065857, 0.5815973877906799, -1.3402208089828491,
             -0.6601788401603699, 0.5164952874183655, 1.023621916770935, -0.5930736660957336, 0.5589791536331177,
             -1.8823858499526978, 0.5044417977333069, 1.4276658296585083, -0.20004169642925262, -0.6150119304656982,
             2.675446033477783],
            [0.04964533820748329, 1.3835610151290894, -0.6494458913803101, -1.1882952451705933, -1.5294663906097412,
             0.9960830211639404, -1.657595157623291, -1.9955267906188965, -0.613344132900238, -0.3884783089160919,
             -0.2753674387931824, -1.2401111125946045, -0.8072506189346313, 0.05713699758052826, -1.932692527770996,
             0.09799668192863464, 0.6059405207633972, 1.3732699155807495, 0.45569413900375366, 1.157427191734314,
             0.30123087763786316, 1.4945106506347656, 0.12768052518367767, 2.0873517990112305, 0.5998439192771912,
             -0.5572828054428101, 0.1847275048494339, -1.741699457168579, 1.2110826969146729, -0.2733422517776489,
             1.2328236103057861, 2.209360361099243, 0.01043834537267685, 0.03825530782341957, -0.15099526941776276,
             0.373089998960495, 2.2164390087127686, 1.2840505838394165, 0.24143345654010773, 1.0604685544967651,
             -2.0579633712768555, 0.12392197549343109, -2.8295371532440186, 1.124316692352295, -2.1687698364257812,
             0.5476518869400024, -0.9028320908546448, 2.5591225624084473],
            [1, 1, -1], 16),
        1: ([0.6418401002883911, 0.8939739465713501, -0.14249187707901, 0.464797705411911, 0.055599428713321686,
             0.903595507144928, 0.9290530681610107, -0.8533987998962402],
            [-1.155896782875061, 0.569095253944397, -1.6434097290039062, 0.9656765460968018, 0.43828320503234863,
             0.015603897161781788, -0.15222382545471191, 0.6149086952209473, -1.3768298625946045, -1.7709540128707886,
             0.12208912521600723, -0.05954893305897713, -1.6770774126052856, 1.7359673976898193, -0.7803622484207153,
             0.44765573740005493, -1.9495781660079956, -0.10438673198223114, -0.4161265790462494, 1.1163967847824097,
             -0.1839495301246643, -0.6404224634170532, -2.0229265689849854, -0.9797637462615967, -1.1162172555923462,
             1.9972119331359863, -0.7617077231407166, -1.4342044591903687, 0.3278196454048157, 0.03891510143876076,
             0.6801275610923767, 0.5157361626625061, 0.28190889954566956, 0.104857437312603, -0.7438753247261047,
             2.83939528465271, 0.027372540906071663, 1.6580296754837036, -0.2107481211423874, -0.7756255269050598,
             1.7440992593765259, -0.6255685091018677, 2.145742177963257, 1.310866117477417, -0.7040866017341614,
             -0.8478923439979553, -1.5147119760513306, 1.5727840662002563, -1.3726176023483276, 1.9949480295181274,
             0.6038126349449158, -0.21151956915855408, -0.32167500257492065, 0.04284535348415375, 0.8466077446937561,
             -0.3174930512905121],
            [-1, -1, 1, -1, 1, 1, -1], 8),
    }
    inputs = os.path.join(tmp, "flipped")
    os.makedirs(inputs)
    for layer, (q, k, signs, d) in layers.items():
        arrays = {"q": np.array(q, f32).reshape(1, 1, 1, d), "k": np.array(k, f32).reshape(1, 1, -1, d),
                  "v": np.repeat(np.array(signs, f32).reshape(1, 1, -1, 1), d, axis=-1)}
        for n, a in arrays.items():
            np.save(os.path.join(inputs, f"layer{layer}_{n}.npy"), a)
    plan_path = os.path.join(tmp, "flipped_plan.json")
    r = pasa("calibrate", "--inputs", inputs, "--fast", "sage4", "--accurate", "sage8", "--xi", "50",
             "--out", plan_path)
    assert "layer0: CosSim -1.00000  L1 1.3288  score 0.00000" in r.stderr, r.stderr
    accurate = [e["layer"] for e in json.load(open(plan_path))["entries"] if e["policy"] == "sage8"]
    assert accurate == [0], r.stderr


def check_calibrate_keeps_going_past_calls_it_cannot_score(tmp):
    # A call no policy can run (V's head dim differs from K's) is left out of the plan, said so; one the
    # fast policy refuses (q past fp16) scores the worst and goes to the accurate policy. Neither ends
    # the command any more.
    rng = np.random.default_rng(3)
    inputs = os.path.join(tmp, "unscorable")
    os.makedirs(inputs)
    shapes = {0: (8, 8, 1.0), 1: (8, 5, 1.0), 2: (8, 8, 1e5), 3: (8, 8, 1.0)}
    for layer, (d, dv, q_scale) in shapes.items():
        arrays = {"q": rng.standard_normal((1, 1, 16, d)) * q_scale, "k": rng.standard_normal((1, 1, 16, d)),
                  "v": rng.standard_normal((1, 1, 16, dv))}
        for n, a in arrays.items():
            np.save(os.path.join(inputs, f"layer{layer}_{n}.npy"), a.astype(np.float32))
    plan_path = os.path.join(tmp, "unscorable_plan.json")
    r = pasa("calibrate", "--inputs", inputs, "--fast", "fa16", "--accurate", "exact", "--xi", "30",
             "--out", plan_path)
    assert "layer1: left out of the plan: pasa cannot run this call (v: shape [1, 1, 16, 5]" in r.stderr, r.stderr
    assert "layer2: fa16 refuses it (q: value" in r.stderr and "score -1" in r.stderr, r.stderr
    entries = {e["layer"]: e["policy"] for e in json.load(open(plan_path))["entries"]}
    assert entries == {0: "fa16", 2: "exact", 3: "fa16"}, entries


def write_safetensors(path, tensors):
    """A .safetensors file of float32 arrays (the format's JSON header, then the bytes)."""
    header, offset, blobs = {}, 0, []
    for name, a in tensors.items():
        data = np.ascontiguousarray(a, np.float32).tobytes()
        header[name] = {"dtype": "F32", "shape": list(a.shape), "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
        blobs.append(data)
    text = json.dumps(header).encode()
    with open(path, "wb") as f:
        f.write(len(text).to_bytes(8, "little") + text + b"".join(blobs))


def check_calibrate_reads_the_capture_index(tmp):
    # pasa.capture's directory: index.json lists the calls with their options; a file it does not list
    # (an earlier capture's) is not scored; a call captured with a mask is scored without it, said so.
    rng = np.random.default_rng()
    inputs = os.path.join(tmp, "capture")
    os.makedirs(inputs)
    for layer in range(4):
        qkv = {n: rng.standard_normal((1, 2, 64, 32)) for n in "qkv"}
        # The last key ten times larger, and the last query (the only one that sees it when causal) 0:
        # its scores, 2% of the call's, set the ends of the range of all scores and none of the
        # visible ones (with draws alone, the two ranges could end on the same scores).
        qkv["k"][:, :, 63] *= 10
        qkv["q"][:, :, 63] = 0
        write_safetensors(os.path.join(inputs, f"layer{layer}.safetensors"), qkv)

    def call(layer, causal=False, scale=None, mask=False):
        return {"name": f"layer{layer}", "file": f"layer{layer}.safetensors", "is_causal": causal,
                "causal_alignment": "top_left", "scale": scale, "attn_mask": mask}

    def scores(entries):
        with open(os.path.join(inputs, "index.json"), "w") as f:
            json.dump({"format": "pasa-capture-1", "entries": entries}, f)
        r = pasa("calibrate", "--inputs", inputs, "--out", os.path.join(tmp, "plan.json"))
        return r.stderr, {e["layer"] for e in json.load(open(os.path.join(tmp, "plan.json")))["entries"]}

    plain, layers = scores([call(0), call(1), call(2, mask=True)])
    assert layers == {0, 1, 2}, layers
    assert "holds 1 captured inputs that its index.json does not list" in plain, plain
    assert "layer2 was captured with an attn_mask" in plain, plain
    line = lambda text, name: next(x for x in text.splitlines() if x.startswith(name + ":"))
    for changed in ({"causal": True}, {"scale": 0.5}):  # each of the call's options alone
        other, _ = scores([call(0), call(1, **changed), call(2, mask=True)])
        assert line(plain, "layer0") == line(other, "layer0"), (changed, plain, other)
        assert line(plain, "layer1") != line(other, "layer1"), (changed, plain, other)
    # --phi scales the scores by the index's scale: a doubled scale moves phi's range.
    ranges = []
    for scale in (None, 2 / 32 ** 0.5):  # (1 / sqrt(D) doubled, D = 32)
        scores([call(0, scale=scale), call(1, scale=scale)])
        r = pasa("calibrate", "--inputs", inputs, "--phi")
        ranges.append(r.stdout.split("within [")[1].split("]")[0])
    assert ranges[0] != ranges[1], ranges
    # ... and takes a causal call's visible scores only (the first query sees one key).
    scores([call(0, causal=True), call(1, causal=True)])
    r = pasa("calibrate", "--inputs", inputs, "--phi")
    assert r.stdout.split("within [")[1].split("]")[0] != ranges[0], (r.stdout, ranges)
    with open(os.path.join(inputs, "index.json"), "w") as f:
        json.dump({"format": "pasa-capture-1", "entries": []}, f)
    r = pasa("calibrate", "--inputs", inputs, "--out", os.path.join(tmp, "plan.json"), ok=False)
    assert "lists no calls" in r.stderr, r.stderr
    with open(os.path.join(inputs, "index.json"), "w") as f:
        json.dump({"format": "pasa-capture-1", "entries": [call(0), dict(call(5), file="layer5.safetensors")]}, f)
    r = pasa("calibrate", "--inputs", inputs, "--out", os.path.join(tmp, "plan.json"), ok=False)
    assert "index.json lists layer5.safetensors, which is missing" in r.stderr, r.stderr
    # A NaN or infinite scale, which pasa.capture writes as its text, and a finite one beyond fp32's
    # range: the call is left out of the plan and out of --phi's scores, said so; the others count.
    for bad in ("nan", "-inf", 1e39):
        with open(os.path.join(inputs, "index.json"), "w") as f:
            json.dump({"format": "pasa-capture-1", "entries": [call(0), call(1, scale=bad)]}, f)
        r = pasa("calibrate", "--inputs", inputs, "--out", os.path.join(tmp, "plan.json"))
        assert "layer1: left out of the plan: pasa cannot run this call (scale: " in r.stderr, r.stderr
        assert {e["layer"] for e in json.load(open(os.path.join(tmp, "plan.json")))["entries"]} == {0}
        r = pasa("calibrate", "--inputs", inputs, "--phi")
        assert "layer1: left out: fdpp cannot run this call (scale: " in r.stderr, r.stderr
        assert "scaled scores of 1 entries" in r.stdout, r.stdout
    with open(os.path.join(inputs, "index.json"), "w") as f:
        json.dump({"format": "pasa-capture-1", "entries": [call(1, scale="nan")]}, f)
    r = pasa("calibrate", "--inputs", inputs, "--phi", code=BAD_INPUT)
    assert "no captured call that fdpp can run" in r.stderr, r.stderr
    with open(os.path.join(inputs, "index.json"), "w") as f:
        json.dump({"format": "pasa-capture-1", "entries": [dict(call(0), scale="NaN")]}, f)
    r = pasa("calibrate", "--inputs", inputs, "--out", os.path.join(tmp, "plan.json"), ok=False)
    assert 'entries[0].scale: "NaN" is not a number, null, or one of' in r.stderr, r.stderr
    # Without index.json (a capture stopped before it wrote its index), the files are scored with
    # the defaults, and a note says so.
    os.remove(os.path.join(inputs, "index.json"))
    r = pasa("calibrate", "--inputs", inputs, "--out", os.path.join(tmp, "plan.json"))
    assert "has no index.json: its calls are scored non-causal at scale 1/sqrt(D)" in r.stderr, r.stderr
    # The plan never replaces the index it is computed from.
    with open(os.path.join(inputs, "index.json"), "w") as f:
        json.dump({"format": "pasa-capture-1", "entries": [call(0)]}, f)
    r = pasa("calibrate", "--inputs", inputs, "--out", os.path.join(inputs, "index.json"), code=BAD_INPUT)
    assert "index.json" in r.stderr.splitlines()[-1], r.stderr
    assert json.load(open(os.path.join(inputs, "index.json")))["format"] == "pasa-capture-1"
    os.remove(os.path.join(inputs, "index.json"))  # ... nor writes one where the capture has none
    pasa("calibrate", "--inputs", inputs, "--out", os.path.join(inputs, "index.json"), code=BAD_INPUT)
    assert not os.path.exists(os.path.join(inputs, "index.json"))


def check_arguments():
    # The CLI's own argument parser: help for every command, and usage errors (exit code 2) that name
    # the option and never run the command.
    r = pasa("--help")
    assert all(c in r.stdout for c in ("run", "study", "beta", "inspect", "calibrate", "bench")), r.stdout
    r = pasa("study", "--help")
    assert "--seq VALUE" in r.stdout and "[default: 1280]" in r.stdout and "sage" in r.stdout, r.stdout
    r = pasa("study", "sage", "-h")
    assert "pasa study sage" in r.stdout, r.stdout
    # An integer option takes a whole number in a double's syntax, as policy fields do.
    assert pasa("beta", "--block", "1.28e2").stdout == pasa("beta", "--block", "128").stdout
    for args, words in ((("beta", "--block", "12x"), "--block: '12x' is not an integer"),
                        (("beta", "--block", "1.25e1"), "--block: '1.25e1' is not an integer"),
                        (("beta", "--nope"), "no option --nope"),
                        (("beta", "--block"), "--block needs a value"),
                        # a forgotten value is not the next option (a file named --causal)
                        (("run", "--q", "q.npy", "--lse", "--causal"), "--lse needs a value (the next argument, --causal"),
                        # the study's own options would be ignored by its sage and decode commands
                        (("study", "--json", "x.json", "decode"), "--json is an option of 'pasa study' itself"),
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
                        (("--tokens", "0"), "--tokens"), (("--decode-batch", "0"), "--decode-batch"),
                        (("--decode-batch", "-5"), "--decode-batch"),
                        (("--decode-cache", "paged12"), "power of two"),
                        (("--decode-cache", "paged64", "--decode-seq", "100"), "divide every --decode-seq")):
        r = pasa("bench", *args, ok=False)
        assert r.returncode == 2 and words in r.stderr, r.stderr
    # A LIST of policies takes each preset's overrides after it (calibrate --phi prints fdpp,phi=...).
    # (--decode-cache is checked after the policies: its error says they were taken)
    r = pasa("bench", "--policy", "pasa,beta=0.5,exact", "--decode-policy", "fdpp,phi=-2.15", "--decode-cache",
             "paged12", ok=False)
    assert r.returncode == 2 and "power of two" in r.stderr, r.stderr
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
    else:  # a missing GPU is the machine's lack, a runtime failure: exit 1
        assert r.returncode == 1 and ("GPU" in r.stderr or "CUDA" in r.stderr), r.stderr
        assert r.stderr.startswith("pasa: error: pasa bench: "), r.stderr


def check_overhead():
    # On the CPU emulator (one query, one key): a positive host time for each way of calling.
    r = pasa("overhead", "--device", "cpu", "--heads-q", "1", "--heads-kv", "1", "--seq-kv", "1",
             "--head-dim", "8", "--calls", "5")
    rows = [line for line in r.stdout.splitlines()
            if line.startswith("| pasa::attention") or line.startswith("| AttentionPlan::run")]
    assert len(rows) == 2 and all(float(line.split("|")[2]) > 0 for line in rows), r.stdout
    r = pasa("overhead", "--device", "tpu", ok=False)
    assert r.returncode == 2 and "--device" in r.stderr, r.stderr
    # The CPU measures the emulator's fixed cost: the small shape by default, in seconds, and the
    # sizes given otherwise, whether the CPU was asked for or found (auto without a GPU).
    start = time.monotonic()
    r = pasa("overhead", "--device", "cpu")
    assert "H 1/1, S_q 1, S_kv 1, D 8" in r.stdout and time.monotonic() - start < 60, r.stdout
    for device in ("cpu", "auto"):
        # (head dim 64: "auto" on a GPU machine measures the GPU, whose kernels take 64, 96, 128, 256)
        r = pasa("overhead", "--device", device, "--heads-q", "2", "--heads-kv", "1", "--seq-kv", "16",
                 "--head-dim", "64", "--calls", "5")
        if "CPU emulator" in r.stdout:
            assert "H 2/1, S_q 1, S_kv 16, D 64" in r.stdout, r.stdout
    # Without a GPU, asking for one is a runtime failure (exit 1), not bad input.
    r = subprocess.run([PASA, "overhead", "--device", "cuda", "--calls", "5"], capture_output=True, text=True)
    assert r.returncode in (0, 1), r.stderr
    if r.returncode == 1:  # naming the command run (the library's words name none)
        assert r.stderr.startswith("pasa: error: pasa overhead --device cuda: ") and "pasa bench" not in r.stderr, r.stderr
        assert "GPU" in r.stderr or "CUDA" in r.stderr, r.stderr


BAD_INPUT, RUNTIME_FAILURE = 2, 1


def check_pipes_are_refused(tmp):
    # A FIFO as an input would block the reader until a writer came: refused at once, exit 2.
    q, k, v = save_qkv(tmp, "p")
    fifo = os.path.join(tmp, "fifo.npy")
    os.mkfifo(fifo)
    for args in (("run", "--q", fifo, "--k", k, "--v", v), ("inspect", "--q", fifo, "--k", k)):
        r = pasa(*args, code=BAD_INPUT, timeout=20)
        assert "fifo.npy: is not a regular file" in r.stderr, r.stderr
    captures = os.path.join(tmp, "fifo_captures")
    os.makedirs(captures)
    for n, path in zip("qk", (q, k)):
        os.link(path, os.path.join(captures, f"layer0_{n}.npy"))
    os.mkfifo(os.path.join(captures, "layer0_v.npy"))
    for extra in (("--out", os.path.join(tmp, "plan.json")), ("--phi",)):
        r = pasa("calibrate", "--inputs", captures, *extra, code=BAD_INPUT, timeout=20)
        assert "layer0_v.npy: is not a regular file" in r.stderr, r.stderr


def check_options_are_validated():
    for args, words in ((("study", "--policy", "exact", "--policy", "exact"), "--policy: exact is given twice"),
                        (("study", "--policy", "exact", "--policy", " exact"), "--policy:  exact is given twice"),
                        (("study", "--policy", "pasa", "--policy", "pasa,beta=0.984497"),
                         "given twice (the same policy as pasa)"),
                        (("inspect", "--beta", "nan"), "--beta: policy field 'beta': nan is outside [0, 1)"),
                        (("inspect", "--beta", "1"), "--beta: policy field 'beta': 1 is outside [0, 1)"),
                        (("inspect", "--beta", "-1e30"), "--beta"),
                        (("inspect", "--block", "100000"), "--block: policy field 's2': block size 100000 is outside 1..1024"),
                        (("beta", "--block", "1000000000"), "--block: policy field 's2'"),
                        (("beta", "--block", "0"), "is outside 1..1024"),
                        (("beta", "--init", "1.5"), "--init: 1.5 is outside (0, 1)"),
                        (("beta", "--scale", "1e30"), "--scale: 1e+30 folded into M is beyond fp16's largest value 65504"),
                        (("beta", "--scale", "1e-7"), "--scale: with 1e-07 folded into M no initial value leads"),
                        (("beta", "--format", "int8"), "--format: int8 is an integer format"),
                        (("inspect", "--gen", "uniform", "--x0", "1e39"), "--x0/--am: uniform with x0 = 1e+39"),
                        (("inspect", "--gen", "uniform", "--x0", "nan"), "--x0: nan is not finite"),
                        (("inspect", "--gen", "hybrid", "--am", "1e6"), "--x0/--am: hybrid"),
                        (("inspect", "--x0", "3"), "--x0/--am: apply to --gen uniform or hybrid"),
                        (("inspect", "--gen", "uniform", "--preset", "svd"), "--preset: applies to --gen resonance"),
                        (("overhead", "--calls", "100000000"), "--calls: 100000000 is outside 1..10000"),
                        (("overhead", "--device", "cpu", "--dtype", "fp16"), "--dtype: applies to the GPU")):
        r = pasa(*args, code=BAD_INPUT, timeout=30)
        assert words in r.stderr and "--q" not in r.stderr, (args, r.stderr)
    # bf16 cannot hold the paper's last initial value 0.999 in M at s2 = 128 (it rounds to a singular
    # M): the default table still works and says so in that row; alone, it is an error naming why.
    r = pasa("beta", "--format", "bf16")
    row = next(line for line in r.stdout.splitlines() if line.startswith("| 0.999000 |"))
    assert "none: M rounded to bf16 applies beta = 1, outside [0, 1)" in row, r.stdout
    assert "| 0.984375 | 0.984497 |" in r.stdout, r.stdout
    for fmt in ("fp16", "bf16", "e4m3", "e5m2", "fp22", "fp32", "fp64"):
        pasa("beta", "--format", fmt)
    r = pasa("beta", "--format", "bf16", "--init", "0.999", code=BAD_INPUT)
    assert "no initial value leads to an optimal beta in bf16" in r.stderr, r.stderr


def check_usage_errors(tmp):
    # One line each, pointing to the --help of the command concerned.
    q, k, v = save_qkv(tmp, "u")
    missing = os.path.join(tmp, "missing.npy")
    captures = os.path.join(tmp, "usage_captures")
    os.makedirs(captures)
    for args, words, command in (
            (("run", "--nope"), "'pasa run' has no option --nope", "pasa run"),
            (("study", "sage", "--nope"), "'pasa study sage' has no option --nope", "pasa study sage"),
            (("frobnicate",), "'frobnicate'", "pasa"),
            (("run", "--q", q, "--q", k, "--k", k, "--v", v), "--q is given more than once", "pasa run"),
            (("run", "--q", q, "--k", k, "--v", v, "--alignment", "top_left"), "--alignment needs --causal",
             "pasa run"),
            (("run", "--qkv", "x.safetensors", "--q", q), "--qkv cannot be combined with --q", "pasa run"),
            (("inspect", "--q", q, "--k", k, "--gen", "uniform"), "--gen cannot be combined with --q", "pasa inspect"),
            (("inspect", "--q", q, "--k", k, "--seq", "64"), "--seq cannot be combined with --q", "pasa inspect"),
            (("calibrate", "--inputs", captures, "--phi", "--xi", "5"), "--xi cannot be combined with --phi",
             "pasa calibrate"),
            (("calibrate", "--inputs", captures, "--phi", "--fast", "sage8"), "--fast cannot be combined with --phi",
             "pasa calibrate"),
            (("bench", "--no-decode", "--decode-seq", "512"), "--decode-seq cannot be combined with --no-decode",
             "pasa bench"),
            # Option values the commands check themselves (missing, out of range, not among the
            # choices, policy text that does not parse) are usage errors alike.
            (("run", "--q", q), "give --q, --k and --v", "pasa run"),
            (("run", "--q", q, "--k", k, "--v", v, "--causal", "--alignment", "sideways"),
             "--alignment: 'sideways' is not bottom_right or top_left", "pasa run"),
            (("run", "--q", q, "--k", k, "--v", v, "--policy", "pasa,beta=2"), "--policy: policy field 'beta'",
             "pasa run"),
            (("beta", "--init", "1.5"), "--init: 1.5 is outside (0, 1)", "pasa beta"),
            (("beta", "--format", "fp99"), "--format: unknown number format 'fp99'", "pasa beta"),
            (("beta", "--block", "0"), "--block: policy field 's2': block size 0 is outside 1..1024", "pasa beta"),
            (("inspect", "--beta", "1"), "--beta: policy field 'beta': 1 is outside [0, 1)", "pasa inspect"),
            (("inspect", "--q", q), "give both --q and --k", "pasa inspect"),
            (("inspect", "--gen", "gauss"), "--gen: 'gauss' is not uniform, hybrid or resonance", "pasa inspect"),
            (("calibrate", "--inputs", captures, "--xi", "101", "--out", "p.json"), "--xi: 101 is outside 0..100",
             "pasa calibrate"),
            (("calibrate", "--inputs", captures, "--fast", "nope", "--out", "p.json"), "--fast: unknown policy 'nope'",
             "pasa calibrate"),
            (("bench", "--runs", "0"), "--runs must be at least 1", "pasa bench"),
            (("bench", "--policy", "nonsense"), "--policy: unknown policy 'nonsense'", "pasa bench"),
            (("bench", "--policy", "beta=0.5,pasa"), "--policy: 'beta=0.5' overrides a field, but follows no preset",
             "pasa bench"),
            (("bench", "--decode-policy", "fdpp,phi=-2,window_lo=-99"), "--decode-policy: policy field 'window_lo'",
             "pasa bench"),
            *((("bench", option, value), f"{option}: {twice} is given twice", "pasa bench")
              for option, value, twice in (("--seq", "1024,4096,1024", "1024"), ("--head-dim", "64,64", "64"),
                                          ("--mask", "full,causal,full", "full"), ("--dtype", "bf16,bf16", "bf16"),
                                          ("--policy", "exact, exact", "exact"),
                                          ("--policy", "pasa,pasa_accurate,pseudo_avg=acc,s=fp16,softmax=fp16,"
                                                       "exp_base=2",
                                           "pasa_accurate,s=fp16,softmax=fp16,exp_base=2,pseudo_avg=acc"),
                                          ("--decode-policy", "fdpp,phi=-2,fdpp,phi=-2.0", "fdpp,phi=-2"),
                                          ("--decode-cache", "paged16,dense,paged16", "paged16"))),
            (("overhead", "--calls", "0"), "--calls: 0 is outside 1..10000", "pasa overhead"),
            (("overhead", "--device", "tpu"), "--device: 'tpu' is not auto, cuda or cpu", "pasa overhead"),
            (("study", "--seq", "0"), "--seq: 0 is not a positive length", "pasa study"),
            (("study", "sage", "--seq", "0"), "--seq: 0 is not a positive length", "pasa study sage"),
            (("study", "decode", "--batch", "0"), "--batch: 0 is not a positive count", "pasa study decode"),
            # Checked before any file is read (--q names none here) or any data is drawn (which would
            # need terabytes at --seq 100000000 --heads 100).
            *((("run", "--q", missing, "--k", k, "--v", v, "--scale", scale), words, "pasa run")
              for scale, words in (("nan", "--scale: nan is not finite"), ("inf", "--scale: inf is not finite"),
                                   ("1e39", "--scale: 1e+39 is outside [-3.40282e+38, 3.40282e+38]"),
                                   ("1e300", "--scale: 1e+300 is outside"),
                                   ("1e400", "--scale: 1e400 is out of range (a double's largest magnitude"))),
            # (pasa folds its scale into M, where one too small rounds M singular)
            *((("run", "--q", missing, "--k", k, "--v", v, "--policy", "pasa", "--scale", scale),
               "scale: folded into the shifting matrix M (the policy's scale=k) as", "pasa run")
              for scale in ("1e-4", "0", "-0")),
            (("inspect", "--preset", "nope"), "--preset: resonance: unknown preset 'nope' (qwen2, svd)", "pasa inspect"),
            (("inspect", "--gen", "uniform", "--x0", "1e9", "--seq", "100000000", "--heads", "100"),
             "--x0/--am: uniform with x0 = 1e+09, Am = 10 can draw 1e+09 in magnitude, beyond fp16's 65504",
             "pasa inspect"),
            (("inspect", "--gen", "uniform", "--x0", "70000"), "--x0/--am: uniform with x0 = 70000, Am = 10 can draw 70010",
             "pasa inspect"),
            (("inspect", "--gen", "uniform", "--am", "1e308"), "--x0/--am: uniform with x0 = 20, Am = 1e+308", "pasa inspect"),
            (("inspect", "--gen", "hybrid", "--x0", "-70000"), "--x0/--am: hybrid with x0 = -70000, Am = 10 can draw",
             "pasa inspect"),
            (("overhead", "--device", "cpu", "--heads-q", "3", "--heads-kv", "2"),
             "--heads-q/--heads-kv: 2 K/V heads do not divide the 3 query heads", "pasa overhead"),
            (("overhead", "--device", "cpu", "--heads-q", "4", "--heads-kv", "8"),
             "--heads-q/--heads-kv: 8 K/V heads do not divide the 4 query heads", "pasa overhead"),
            (("overhead", "--device", "cpu", "--head-dim", "2000"), "--head-dim: 2000 is larger than the CPU emulator's 1024",
             "pasa overhead"),
            # Numbers past what an option's type holds are out of range, with the option's range where it
            # has one (the range its command checks within the type), else the type's limit.
            (("beta", "--block", "3000000000"), "--block: 3000000000 is out of range (must be in 1..1024)", "pasa beta"),
            (("beta", "--block", "1e400"), "--block: 1e400 is out of range (must be in 1..1024)", "pasa beta"),
            (("inspect", "--block", "3000000000"), "--block: 3000000000 is out of range (must be in 1..1024)",
             "pasa inspect"),
            (("bench", "--head-dim", "3000000000"),
             "--head-dim: 3000000000 is out of range (the kernels take 64, 96, 128 or 256)", "pasa bench"),
            (("bench", "--runs", "3000000000"), "--runs: 3000000000 is out of range (must be at most 2147483647)",
             "pasa bench"),
            (("bench", "--seq", "3000000000"), "--seq: 3000000000 is out of range (must be at most 2147483647)",
             "pasa bench"),
            (("overhead", "--calls", "99999999999999999999"),
             "--calls: 99999999999999999999 is out of range (must be in 1..10000)", "pasa overhead"),
            (("study", "--seq", "99999999999999999999"),
             "--seq: 99999999999999999999 is out of range (must be at most 9223372036854775807)", "pasa study"),
            (("inspect", "--seed", "-1"), "--seed: -1 is out of range (must be at least 0)", "pasa inspect"),
            # (--block's range past an int is s2's, as the policy names it there)
            (("beta", "--block", "2147483648"), "--block: 2147483648 is out of range (must be in 1..1024)", "pasa beta"),
            (("run", "--q", q, "--k", k, "--v", v, "--policy", "exact,s2=2147483648"),
             "--policy: policy field 's2': 2147483648 is out of range (must be in 1..1024)", "pasa run")):
        r = pasa(*args, code=BAD_INPUT)
        assert r.stderr.count("\n") == 1 and words in r.stderr, (args, r.stderr)
        assert r.stderr.rstrip().endswith(f"(see '{command} --help')"), (args, r.stderr)
    # Bad input found in files is not a usage error: no pointer to --help.
    r = pasa("run", "--q", q, "--k", k, "--v", os.path.join(tmp, "nope.npy"), code=BAD_INPUT)
    assert "nope.npy" in r.stderr and "--help" not in r.stderr, r.stderr
    # --qkv takes one .safetensors file: a .npy one is named as such (by its bytes), not misread.
    for path in (q, os.path.join(tmp, "renamed.safetensors")):
        if path != q:
            os.link(q, path)
        r = pasa("run", "--qkv", path, code=BAD_INPUT)
        assert (f"--qkv: {path}: a .npy file (it begins with numpy's magic \\x93NUMPY), not a .safetensors file"
                in r.stderr), r.stderr
    assert "--version" in pasa("--help").stdout


def check_shape_errors_name_their_source(tmp):
    # A tensor of --qkv was named --q; inspect's shape error said neither the shapes nor the options.
    path = os.path.join(tmp, "qkv3d.safetensors")
    write_safetensors(path, {"q": np.ones((2, 5, 8)), "k": np.ones((1, 2, 5, 8)), "v": np.ones((1, 2, 5, 8))})
    r = pasa("run", "--qkv", path, code=2)
    assert f"--qkv {path}: tensor 'q': expected a rank-4 tensor" in r.stderr, r.stderr
    # Tensors of --qkv that do not form a problem together: the error names the file.
    write_safetensors(path, {"q": np.ones((1, 2, 5, 8)), "k": np.ones((1, 2, 5, 8)), "v": np.ones((1, 2, 6, 8))})
    r = pasa("run", "--qkv", path, code=2)
    assert f"--qkv {path}: v: shape [1, 2, 6, 8] differs from k's [1, 2, 5, 8]" in r.stderr, r.stderr
    q, k = os.path.join(tmp, "q8.npy"), os.path.join(tmp, "k16.npy")
    np.save(q, np.ones((1, 2, 5, 8), np.float32))
    np.save(k, np.ones((1, 2, 7, 16), np.float32))
    r = pasa("inspect", "--q", q, "--k", k, code=2)
    assert "--q [1, 2, 5, 8] and --k [1, 2, 7, 16] do not form an attention problem" in r.stderr, r.stderr


def check_output_rules(tmp):
    q, k, v = save_qkv(tmp, "o")
    qkv = ("--q", q, "--k", k, "--v", v)
    # Empty paths are refused, not ignored.
    for args, option in ((("run", *qkv, "--out", ""), "--out"), (("run", *qkv, "--lse="), "--lse"),
                         (("study", "--json", ""), "--json"), (("study", "--plot", ""), "--plot"),
                         (("study", "sage", "--json", ""), "--json"), (("bench", "--csv", ""), "--csv"),
                         (("calibrate", "--inputs", tmp, "--out", ""), "--out")):
        r = pasa(*args, code=BAD_INPUT)
        assert f"{option}: empty value" in r.stderr, (args, r.stderr)
    # A dangling link is followed: its target is created, the link kept; into a missing directory, refused.
    os.makedirs(os.path.join(tmp, "target_dir"))
    link = os.path.join(tmp, "dangling.npy")
    os.symlink("target_dir/new.npy", link)
    pasa("run", *qkv, "--out", link)
    assert os.path.islink(link) and np.load(os.path.join(tmp, "target_dir", "new.npy")).shape == (1, 2, 16, 16)
    bad_link = os.path.join(tmp, "bad_link.npy")
    os.symlink("no_dir/new.npy", bad_link)
    r = pasa("run", *qkv, "--out", bad_link, code=BAD_INPUT)
    assert "is a symbolic link to" in r.stderr and "no_dir does not exist" in r.stderr, r.stderr
    assert "time" not in r.stdout
    # The format follows the name: .npy, .safetensors, or (no extension) .npy; others are refused.
    o_st, lse_st = os.path.join(tmp, "o.safetensors"), os.path.join(tmp, "lse.safetensors")
    pasa("run", *qkv, "--out", o_st, "--lse", lse_st)
    for path, name, shape in ((o_st, "o", [1, 2, 16, 16]), (lse_st, "lse", [1, 2, 16])):
        raw = open(path, "rb").read()
        header = json.loads(raw[8:8 + int.from_bytes(raw[:8], "little")])
        assert list(header) == [name] and header[name]["shape"] == shape, header
    r = pasa("run", *qkv, "--out", os.path.join(tmp, "o.pt"), code=BAD_INPUT)
    assert "--out:" in r.stderr and "unknown file type .pt" in r.stderr, r.stderr
    # An input that is a directory is named so, not as an unknown file type.
    r = pasa("run", "--q", tmp, *qkv[2:], code=BAD_INPUT)
    assert f"{tmp}: is a directory, not a tensor file" in r.stderr, r.stderr
    # Places where no file can be created are refused before the work (root passes access() there).
    for place in ("/proc/pasa_x.npy", "/proc/version", "/sys/pasa_x.npy"):
        if os.path.isdir(os.path.dirname(place)):
            r = pasa("run", *qkv, "--out", place, code=BAD_INPUT)
            assert f"--out: {place}: cannot open for writing" in r.stderr and "time" not in r.stdout, r.stderr
    # Outputs change together: a failing --lse leaves --out as it was, and no temporary behind.
    keep = os.path.join(tmp, "keep.npy")
    for out, lse in ((keep, "/dev/full"), ("/dev/full", keep)):
        with open(keep, "w") as f:
            f.write("keep")
        r = pasa("run", *qkv, "--out", out, "--lse", lse, code=RUNTIME_FAILURE)
        assert "/dev/full: write failed" in r.stderr and "wrote" not in r.stdout, r.stderr
        assert open(keep).read() == "keep"
    assert not [f for f in os.listdir(tmp) if ".tmp-" in f]
    # A name near the file system's limit (255 bytes) is written: its temporary's name is cut short
    # (on a character's first byte).
    for long_name in ("a" * 250 + ".npy", "a" * 199 + "\u00e9" * 26 + ".npy"):
        long_name = os.path.join(tmp, long_name)
        pasa("run", *qkv, "--out", long_name)
        assert np.load(long_name).shape == (1, 2, 16, 16)
    assert not [f for f in os.listdir(tmp) if ".tmp-" in f]
    # --json may not take a figure's place in the --plot directory (checked before matplotlib is).
    for plot in (os.path.join(tmp, "figs"), os.path.join(tmp, "figs") + "/"):
        r = pasa("study", "--seq", "8", "--plot", plot, "--json",
                 os.path.join(tmp, "figs", "figure9a_uniform_mean.png"), code=BAD_INPUT)
        assert "where the figures (.png files) are written" in r.stderr, r.stderr
    # So may --json name the figures' own results file, told before matplotlib is looked for.
    for plot, json_name in (("figs", "study.json"), ("figs/", "study.json")):
        r = pasa("study", "--seq", "8", "--plot", os.path.join(tmp, plot), "--json",
                 os.path.join(tmp, "figs", json_name), code=BAD_INPUT,
                 env=dict(os.environ, PATH=fake_python(tmp, "no_matplotlib_" + str(len(plot)), 1)))
        assert "(the results the figures are drawn from) is the same file as --json" in r.stderr, r.stderr
        assert not os.path.exists(os.path.join(tmp, "figs"))


def fake_python(tmp, name, status):
    """A directory holding a `python3` that exits with `status` whatever it is asked."""
    directory = os.path.join(tmp, name)
    os.makedirs(directory)
    with open(os.path.join(directory, "python3"), "w") as f:
        f.write(f"#!/bin/sh\nexit {status}\n")
    os.chmod(os.path.join(directory, "python3"), 0o755)
    return directory


def check_plot_setup(tmp):
    # matplotlib is looked for before the study: exit 1, one line naming it and how to install it.
    short = ("--seq", "32", "--heads", "1", "--policy", "exact")
    no_matplotlib = dict(os.environ, PATH=fake_python(tmp, "no_matplotlib", 1))
    start = time.monotonic()
    r = pasa("study", *short, "--plot", os.path.join(tmp, "figs"), code=RUNTIME_FAILURE, env=no_matplotlib)
    assert "cannot import (pip install matplotlib)" in r.stderr and "[" not in r.stderr, r.stderr
    assert time.monotonic() - start < 10 and not os.path.exists(os.path.join(tmp, "figs"))
    r = pasa("study", *short, "--plot", os.path.join(tmp, "figs"), code=RUNTIME_FAILURE,
             env=dict(os.environ, PATH="/nonexistent"))
    assert "no python3 is on the PATH" in r.stderr, r.stderr
    # --plot makes its directory's last component only, as the other outputs need their directory.
    r = pasa("study", *short, "--plot", os.path.join(tmp, "a", "b"), code=BAD_INPUT)
    assert "--plot" in r.stderr and "does not exist" in r.stderr, r.stderr
    # Made before the other outputs are checked, so --json may name a file in it, though not the
    # figures' own results file.
    plots = os.path.join(tmp, "plots")
    fine = dict(os.environ, PATH=fake_python(tmp, "fine_python", 0))
    r = pasa("study", *short, "--plot", plots, "--json", os.path.join(plots, "study.json"), code=BAD_INPUT, env=fine)
    assert "same file as --json" in r.stderr, r.stderr
    assert not os.path.exists(plots)  # a refused command leaves no folder of its own
    for bad in (("--policy", "bogus"), ("--policy", "exact", "--policy", "exact")):
        r = pasa("study", "--seq", "32", "--heads", "1", *bad, "--plot", plots, code=BAD_INPUT, env=fine)
        assert not os.path.exists(plots) and r.stdout == "", r.stdout
    pasa("study", *short, "--plot", plots, "--json", os.path.join(plots, "all.json"), env=fine)
    assert {"all.json", "study.json"} <= set(os.listdir(plots)), os.listdir(plots)
    # A link to a missing directory is refused, and the user's link left as it was.
    link = os.path.join(tmp, "plots_link")
    os.symlink("nowhere", link)
    for command in (("study", *short), ("study", "sage", "--seq", "32", "--heads", "1")):
        r = pasa(*command, "--plot", link, code=BAD_INPUT, env=fine)
        assert "symbolic link to a directory that does not exist" in r.stderr, r.stderr
        assert os.path.islink(link) and os.readlink(link) == "nowhere"
    # A relative directory whose name begins with '-' is no option of python3's.
    strict = os.path.join(tmp, "strict_python")
    os.makedirs(strict)
    with open(os.path.join(strict, "python3"), "w") as f:
        f.write('#!/bin/sh\ncase "$1" in -c) exit 0;; -*) exit 2;; esac\nexit 0\n')
    os.chmod(os.path.join(strict, "python3"), 0o755)
    subprocess.run([PASA, "study", *short, "--plot", "-figs"], cwd=tmp, check=True, capture_output=True,
                   env=dict(os.environ, PATH=strict))
    assert os.path.exists(os.path.join(tmp, "-figs", "study.json"))


def check_json_on_stdout():
    # A JSON file on standard output holds it alone: the study's report goes to stderr.
    for args in (("study", "--seq", "32", "--heads", "1", "--policy", "exact"),
                 ("study", "decode", "--seq-kv", "64", "--batch", "1")):
        r = pasa(*args, "--json", "/dev/stdout")
        assert json.loads(r.stdout)["study"] in ("paper", "decode"), r.stdout[:200]
        assert "|---" in r.stderr, r.stderr[:200]  # the tables


def check_stdout_and_cpu_overhead_errors(tmp):
    # /dev/stdout into a pipe is written in place: its links end in /proc's "pipe:[N]", no path.
    q, k, v = save_qkv(tmp, "o")
    # The stream holds the array alone (the report goes to stderr).
    r = subprocess.run([PASA, "run", "--q", q, "--k", k, "--v", v, "--out", "/dev/stdout"], capture_output=True)
    assert r.returncode == 0 and r.stdout.startswith(b"\x93NUMPY"), r.stderr
    assert np.load(io.BytesIO(r.stdout)).shape == (1, 2, 16, 16) and b"wrote /dev/stdout" in r.stderr
    # /dev/stdout appending to a file: written through the descriptor, the file's contents kept.
    log = os.path.join(tmp, "app.log")
    with open(log, "wb") as f:
        f.write(b"earlier line\n")
    with open(log, "ab") as f:
        r = subprocess.run([PASA, "run", "--q", q, "--k", k, "--v", v, "--out", "/dev/stdout"], stdout=f,
                           stderr=subprocess.PIPE)
    assert r.returncode == 0, r.stderr
    data = open(log, "rb").read()
    assert data.startswith(b"earlier line\n\x93NUMPY"), data[:40]
    assert np.load(io.BytesIO(data[len(b"earlier line\n"):])).shape == (1, 2, 16, 16)
    # A failed write to standard output is a failure (exit 1), not a success.
    with open("/dev/full", "w") as full:
        r = subprocess.run([PASA, "beta"], stdout=full, stderr=subprocess.PIPE, text=True)
    assert r.returncode == 1 and "writing to standard output failed" in r.stderr, r.stderr
    # Past `ulimit -f` too: a failed write (exit 1), not death by SIGXFSZ.
    out_file = os.path.join(tmp, "beta.txt")
    r = subprocess.run(["bash", "-c", f'ulimit -f 0; exec "{PASA}" beta > "{out_file}"'], stderr=subprocess.PIPE,
                       text=True)
    assert r.returncode == 1 and "writing to standard output failed" in r.stderr, (r.returncode, r.stderr)
    # Sizes whose tensors cannot exist are a memory error before anything is allocated.
    big = ("--batch", "2147483647", "--heads-q", "2147483647", "--heads-kv", "2147483647", "--seq-kv",
           "2147483647", "--calls", "1")
    r = pasa("overhead", "--device", "cpu", *big, code=RUNTIME_FAILURE)
    assert "the overhead benchmark's tensors: needs" in r.stderr, r.stderr
    # On the CPU a bad shape is bad input (exit 2) whether or not the machine has a GPU.
    r = pasa("overhead", "--device", "cpu", "--heads-q", "3", "--heads-kv", "2", "--calls", "1", code=BAD_INPUT)
    assert "heads" in r.stderr, r.stderr
    r = pasa("overhead", "--batch", "-1", code=BAD_INPUT)
    assert "--batch: -1 is not a size" in r.stderr, r.stderr


CLI_DOC = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "docs", "cli.md")


def help_entries(*command):
    """{"Options": [(left column, description)], "Commands": [...]} of `pasa COMMAND --help`: entries
    start at column 2, their descriptions (wrapped) at column 28."""
    entries, block = {"Options": [], "Commands": []}, None
    for line in pasa(*command, "--help").stdout.splitlines():
        if line.rstrip(":") in entries and line.endswith(":"):
            block = entries[line[:-1]]
        elif not line.strip():
            block = None
        elif block is not None and line.startswith(" " * 28):
            block[-1] = (block[-1][0], (block[-1][1] + " " + line.strip()).strip())
        elif block is not None:
            left = line[2:28].rstrip() if len(line) > 28 and line[27] == " " else line[2:].rstrip()
            block.append((left, line[2 + len(left):].strip()))
    return entries


def check_cli_reference():
    # docs/cli.md lists every command with a section, and in it every option of its --help (as the
    # help's left column writes it) with the help's meaning and default: an option added, renamed or
    # removed, or a changed text or default, fails here until the doc says so. (The doc writes code in
    # backticks, and a default the help gives in its text, "(default 2, or 16 with --full)", in its
    # default column.)
    doc = open(CLI_DOC).read()
    sections, name = {}, None
    for line in doc.splitlines():
        if line.startswith("#") and line.lstrip("#").startswith(" `pasa "):
            name = line.lstrip("#").strip().strip("`")[len("pasa "):]
            sections[name] = []
        elif name is not None:
            sections[name].append(line)
    top = help_entries()
    assert [left for left, _ in top["Options"]] == ["-h, --help", "--version"], top["Options"]
    assert "`pasa --version`" in doc and "`-h, --help`" in doc
    commands = [(name,) for name, _ in top["Commands"]]
    seen = []
    while commands:
        command = commands.pop(0)
        path = " ".join(command)
        seen.append(path)
        assert path in sections, f"docs/cli.md has no section for `pasa {path}`"
        entries = help_entries(*command)
        commands += [command + (sub,) for sub, _ in entries["Commands"]]
        rows = {}
        for row in sections[path]:
            if row.startswith("| `-"):
                cells = [c.strip() for c in row.strip("|").split(" | ")]
                rows[cells[0].strip("`")] = (cells[1].replace("`", ""), cells[-1])
        options = [(left, desc) for left, desc in entries["Options"] if left != "-h, --help"]
        assert sorted(rows) == sorted(left for left, _ in options), (path, sorted(rows), options)
        for left, desc in options:
            meaning, default = rows[left]
            if desc.endswith("]") and "[default: " in desc:
                help_default = desc.rsplit("[default: ", 1)[1][:-1]
                assert default == help_default, f"pasa {path} {left}: docs/cli.md {default!r}, --help {help_default!r}"
                desc = desc.rsplit(" [default: ", 1)[0]
            in_text = re.search(r"\s*\(default:? (.*)\)$", desc)
            if in_text:
                assert default.replace("`", "") == in_text.group(1), \
                    f"pasa {path} {left}: docs/cli.md {default!r}, --help (default {in_text.group(1)})"
                desc = desc[:in_text.start()]
            assert meaning == desc, f"pasa {path} {left}: docs/cli.md {meaning!r}, --help {desc!r}"
    assert sorted(seen) == sorted(sections), sorted(set(sections) - set(seen))


def stdout_while_running(args, path, marker):
    """Runs pasa with stdout into `path` until `marker` is written there, then stops it (SIGTERM): what
    the file held, or None where the command ended first (a machine fast enough leaves nothing to see)."""
    with open(path, "w") as out:
        p = subprocess.Popen([PASA, *args], stdout=out, stderr=subprocess.PIPE)
        deadline = time.monotonic() + 60
        while marker not in open(path).read() and p.poll() is None and time.monotonic() < deadline:
            time.sleep(0.01)
        running = p.poll() is None
        p.send_signal(signal.SIGTERM)
        p.wait(timeout=60)
    return open(path).read() if running else None


def check_run_header_is_flushed(tmp):
    # stdout into a file: the header is there while the attention runs (a run killed then keeps it).
    q, k, v = save_qkv(tmp, "h", shape=(1, 4, 4096, 64))
    text = stdout_while_running(["run", "--q", q, "--k", k, "--v", v], os.path.join(tmp, "run.out"), "policy")
    assert text is None or "policy exact" in text, text
    # A short run says nothing on stderr (the progress lines start after 10 s).
    q, k, v = save_qkv(tmp, "s")
    assert pasa("run", "--q", q, "--k", k, "--v", v).stderr == ""
    # The same for `pasa study`: its header (shape, seed, policies) is there while its first case runs.
    text = stdout_while_running(["study", "--seq", "2048", "--heads", "4"], os.path.join(tmp, "study.out"), "policies")
    assert text is None or "shape (B, H, S, D) = (1, 4, 2048, 128)" in text, text


def main():
    with tempfile.TemporaryDirectory() as tmp:
        check_run(tmp)
        check_version_help_and_alignment(tmp)
        check_beta_and_inspect()
        check_study(tmp)
        check_sage_and_decode_studies(tmp)
        check_calibrate(tmp)
        check_calibrate_ranks_a_flipped_output_worst(tmp)
        check_calibrate_reads_the_capture_index(tmp)
        check_calibrate_keeps_going_past_calls_it_cannot_score(tmp)
    check_arguments()
    check_cli_reference()
    check_bench()
    check_overhead()
    check_options_are_validated()
    check_json_on_stdout()
    for check in (check_pipes_are_refused, check_usage_errors, check_shape_errors_name_their_source,
                  check_output_rules, check_plot_setup,
                  check_stdout_and_cpu_overhead_errors, check_run_header_is_flushed):
        with tempfile.TemporaryDirectory() as tmp:
            check(tmp)
    print("cli tests passed")


if __name__ == "__main__":
    main()
