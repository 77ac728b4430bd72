# SPDX-License-Identifier: Apache-2.0
"""torch SDPA baselines (flash and cuDNN backends) on the points of bench_attention.cu, then one
table of TFLOP/s with pasa's numbers beside them.

Usage: python3 bench/torch_sdpa.py [pasa_csv[,more_csv...]] [out_csv]

pasa's numbers come from `pasa bench --csv` (and bench/bench_attention's variants CSV, if given).

Same points as the C++ bench: head dims 64 / 128, S = 1k / 4k / 16k, B * S = 32k tokens,
H * D = 2048, causal and not, fp16 and bf16, BHSD contiguous, fresh uniform [-1, 1) inputs.
5 warm-up calls, median of 30 timed with CUDA events. TFLOP/s = 4 B H S^2 D / t, halved for causal.

Then decoding, as bench_attention's decode points: S_q = 1, 32 query / 8 KV heads, d = 128, bf16,
B = 64 at S_kv = 4k / 8k / 16k / 32k and (1, 32k), (8, 16k); KV-cache read bandwidth TB/s = bytes of K
and V / t. GQA through enable_gqa=True, else the backend's native head broadcast (said in the output).
"""
import csv
import statistics
import subprocess
import sys

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
import torch.nn.functional as F

TOKENS = 32768
WARMUP, RUNS = 5, 30


def time_call(fn):
    for _ in range(WARMUP):
        fn()
    start = torch.cuda.Event(enable_timing=True)
    stop = torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(RUNS):
        start.record()
        fn()
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop))
    return statistics.median(times)


DECODE_SHAPES = [(64, 4096), (64, 8192), (64, 16384), (64, 32768), (1, 32768), (8, 16384)]
DECODE_HQ, DECODE_HKV, DECODE_D = 32, 8, 128


def bench_decode(backends):
    """torch SDPA on the decode points; rows with tflops = TB/s of K and V read."""
    rows = []
    for B, S in DECODE_SHAPES:
        q = torch.rand(B, DECODE_HQ, 1, DECODE_D, device="cuda", dtype=torch.bfloat16) * 2 - 1
        k, v = (torch.rand(B, DECODE_HKV, S, DECODE_D, device="cuda", dtype=torch.bfloat16) * 2 - 1
                for _ in range(2))
        kv_bytes = 2.0 * B * DECODE_HKV * S * DECODE_D * 2
        for name, backend in backends.items():
            ms, how, err = None, None, None
            for how_name, kwargs in (("enable_gqa", dict(enable_gqa=True)), ("native", {})):
                def call():
                    return F.scaled_dot_product_attention(q, k, v, **kwargs)
                try:
                    with sdpa_kernel(backend):
                        ms = time_call(call)
                    how = how_name
                    break
                except RuntimeError as e:
                    err = str(e).splitlines()[0]
            if ms is None:
                print(f"decode {name} B{B} S_kv{S}: {err}")
                continue
            rows.append(dict(method=name, dtype="bf16", D=DECODE_D, H=DECODE_HQ, S=S, B=B, causal=0, ms=ms,
                             tflops=kv_bytes / (ms * 1e-3) / 1e12))
            print(f"decode {name:<11} bf16 B{B:<3} S_kv{S:<6} {ms:9.4f} ms {rows[-1]['tflops']:6.2f} TB/s ({how})",
                  flush=True)
        del q, k, v
        torch.cuda.empty_cache()
    return rows


def main():
    pasa_csv = sys.argv[1] if len(sys.argv) > 1 else None
    out_csv = sys.argv[2] if len(sys.argv) > 2 else None
    dev = torch.cuda.get_device_name(0)
    try:
        driver = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                capture_output=True, text=True).stdout.strip()
    except OSError:
        driver = "?"
    print(f"torch {torch.__version__}, cuda {torch.version.cuda}, cudnn {torch.backends.cudnn.version()}, "
          f"{dev}, driver {driver}")
    rows = []
    backends = {"torch-flash": SDPBackend.FLASH_ATTENTION, "torch-cudnn": SDPBackend.CUDNN_ATTENTION}
    decode_rows = bench_decode(backends)
    for D in (64, 128):
        H = 2048 // D
        for S in (1024, 4096, 16384):
            B = TOKENS // S
            for causal in (False, True):
                for dtype, dname in ((torch.float16, "fp16"), (torch.bfloat16, "bf16")):
                    q, k, v = (torch.rand(B, H, S, D, device="cuda", dtype=dtype) * 2 - 1 for _ in range(3))
                    flops = 4.0 * B * H * S * S * D * (0.5 if causal else 1.0)
                    for name, backend in backends.items():
                        def call():
                            return F.scaled_dot_product_attention(q, k, v, is_causal=causal)
                        try:
                            with sdpa_kernel(backend):
                                ms = time_call(call)
                        except RuntimeError as e:
                            print(f"{name} {dname} D{D} S{S}: {str(e).splitlines()[0]}")
                            continue
                        rows.append(dict(method=name, dtype=dname, D=D, H=H, S=S, B=B, causal=int(causal),
                                         ms=ms, tflops=flops / (ms * 1e-3) / 1e12))
                        print(f"{name:<11} {dname} D{D:<3} H{H:<2} S{S:<5} B{B:<2} "
                              f"{'causal' if causal else 'full':<6} {ms:9.3f} ms {rows[-1]['tflops']:7.1f} TFLOP/s",
                              flush=True)
                    del q, k, v
    if out_csv:
        with open(out_csv, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(rows[0].keys()) + ["kind"])
            w.writeheader()
            w.writerows(rows)
            w.writerows(dict(r, kind="decode TB/s") for r in decode_rows)
    for path in (pasa_csv.split(",") if pasa_csv else []):
        try:
            with open(path) as f:
                for r in csv.DictReader(f):
                    row = dict(method=r["method"], dtype=r["dtype"], D=int(r["D"]), H=int(r["H"]),
                               S=int(r["S"]), B=int(r["B"]), causal=int(r["causal"]),
                               ms=float(r["ms"]), tflops=float(r["tflops"]))
                    (decode_rows if row["method"].startswith("decode:") else rows).append(row)
        except OSError:
            print(f"(no pasa results at {path})")

    # One table: a row per (dtype, D, S, causal), a column per method, TFLOP/s.
    methods = ["pasa-exact", "pasa-pasa", "pasa-pasa_accurate", "pasa-sage8"] + list(backends)
    table = {}
    for r in rows:
        table.setdefault((r["dtype"], r["D"], r["S"], r["causal"]), {})[r["method"]] = r["tflops"]
    print(f"\nTFLOP/s (forward; {dev}; torch {torch.__version__}; median of {RUNS})")
    print(f"{'dtype':<5} {'D':>4} {'S':>6} {'mask':<6} " + " ".join(f"{m:>12}" for m in methods))
    for key in sorted(table):
        dname, D, S, causal = key
        cells = " ".join(f"{table[key][m]:12.1f}" if m in table[key] else f"{'-':>12}" for m in methods)
        print(f"{dname:<5} {D:>4} {S:>6} {'causal' if causal else 'full':<6} {cells}")

    # The exact kernel's variants (bench_attention.cu), if any: one lever changed each, f16.
    variants = sorted({r["method"] for r in rows if r["method"].startswith("x:")}, key=lambda m: (m != "x:tuned", m))
    if variants:
        columns = variants + ["torch-flash"]
        print("\nexact variants, fp16, TFLOP/s")
        print(f"{'D':>4} {'S':>6} {'mask':<6} " + " ".join(f"{m:>11}" for m in columns))
        for key in sorted(k for k in table if k[0] == "fp16" and any(m in table[k] for m in variants)):
            _, D, S, causal = key
            cells = " ".join(f"{table[key][m]:11.1f}" if m in table[key] else f"{'-':>11}" for m in columns)
            print(f"{D:>4} {S:>6} {'causal' if causal else 'full':<6} {cells}")

    # The targets: exact >= torch flash at S >= 4k; pasa >= 0.95 x exact; pasa_accurate within 5% of pasa.
    print("\nratios: exact / torch-flash, pasa / exact, pasa_accurate / pasa")
    for key in sorted(k for k in table if k[0] in ("fp16", "bf16")):
        t = table[key]
        dname, D, S, causal = key
        r1 = t["pasa-exact"] / t["torch-flash"] if "pasa-exact" in t and "torch-flash" in t else float("nan")
        r2 = t["pasa-pasa"] / t["pasa-exact"] if "pasa-pasa" in t and "pasa-exact" in t else float("nan")
        r3 = (t["pasa-pasa_accurate"] / t["pasa-pasa"]
              if "pasa-pasa_accurate" in t and "pasa-pasa" in t else float("nan"))
        print(f"{dname:<5} {D:>4} {S:>6} {'causal' if causal else 'full':<6} exact/flash {r1:5.2f}"
              + (f"  pasa/exact {r2:5.2f}" if r2 == r2 else "")
              + (f"  accurate/pasa {r3:5.2f}" if r3 == r3 else ""))

    # sage8 end to end (quantization included) against SageAttention2's sm90 kernel, TOPS measured on
    # an H200 by the kernel issue (SageAttention is not installed here), fp16.
    sage2 = {(128, 0): (211, 521, 722), (128, 1): (115, 323, 572), (64, 0): (175, 376, 503), (64, 1): (99, 261, 448)}
    print("\nsage8 vs SageAttention2 (fp16, TFLOP/s; SageAttention2 as measured on this GPU type)")
    print(f"{'D':>4} {'S':>6} {'mask':<6} {'exact':>8} {'sage8':>8} {'Sage2':>8} {'sage8/Sage2':>12}")
    for (D, causal), tops in sorted(sage2.items(), reverse=True):
        for S, ref in zip((1024, 4096, 16384), tops):
            t = table.get(("fp16", D, S, causal), {})
            if "pasa-sage8" in t:
                print(f"{D:>4} {S:>6} {'causal' if causal else 'full':<6} {t.get('pasa-exact', float('nan')):8.1f} "
                      f"{t['pasa-sage8']:8.1f} {ref:8d} {t['pasa-sage8'] / ref:12.2f}")

    # Decode: KV-cache read bandwidth, pasa's split-KV path against torch's backends.
    dmethods = ["decode:exact", "decode:fdpp"] + list(backends)
    dtable = {}
    for r in decode_rows:
        dtable.setdefault((r["B"], r["S"]), {})[r["method"]] = r["tflops"]
    print(f"\ndecode TB/s (K, V bytes / time; S_q 1, {DECODE_HQ}/{DECODE_HKV} heads, d {DECODE_D}, bf16)")
    print(f"{'B':>4} {'S_kv':>6} " + " ".join(f"{m:>13}" for m in dmethods) + "   exact/cudnn  exact/flash")
    for key in sorted(dtable, key=lambda k: (k[0] != 64, k)):
        t = dtable[key]
        cells = " ".join(f"{t[m]:13.2f}" if m in t else f"{'-':>13}" for m in dmethods)
        rc = t["decode:exact"] / t["torch-cudnn"] if "decode:exact" in t and "torch-cudnn" in t else float("nan")
        rf = t["decode:exact"] / t["torch-flash"] if "decode:exact" in t and "torch-flash" in t else float("nan")
        print(f"{key[0]:>4} {key[1]:>6} {cells}   {rc:11.2f}  {rf:11.2f}")


if __name__ == "__main__":
    main()
