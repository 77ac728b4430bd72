"""torch SDPA baselines (flash and cuDNN backends) on the points of bench_attention.cu, then one
table of TFLOP/s with pasa's numbers beside them.

Usage: python3 bench/torch_sdpa.py [pasa_csv] [out_csv]

Same points as the C++ bench: head dims 64 / 128, S = 1k / 4k / 16k, B * S = 32k tokens,
H * D = 2048, causal and not, fp16 and bf16, BHSD contiguous, fresh uniform [-1, 1) inputs.
5 warm-up calls, median of 30 timed with CUDA events. TFLOP/s = 4 B H S^2 D / t, halved for causal.
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
            w = csv.DictWriter(f, fieldnames=list(rows[0].keys()))
            w.writeheader()
            w.writerows(rows)
    if pasa_csv:
        try:
            with open(pasa_csv) as f:
                for r in csv.DictReader(f):
                    rows.append(dict(method=r["method"], dtype=r["dtype"], D=int(r["D"]), H=int(r["H"]),
                                     S=int(r["S"]), B=int(r["B"]), causal=int(r["causal"]),
                                     ms=float(r["ms"]), tflops=float(r["tflops"])))
        except OSError:
            print(f"(no pasa results at {pasa_csv})")

    # One table: a row per (dtype, D, S, causal), a column per method, TFLOP/s.
    methods = ["pasa-exact", "pasa-pasa"] + list(backends)
    table = {}
    for r in rows:
        table.setdefault((r["dtype"], r["D"], r["S"], r["causal"]), {})[r["method"]] = r["tflops"]
    print(f"\nTFLOP/s (forward; {dev}; torch {torch.__version__}; median of {RUNS})")
    print(f"{'dtype':<5} {'D':>4} {'S':>6} {'mask':<6} " + " ".join(f"{m:>12}" for m in methods))
    for key in sorted(table):
        dname, D, S, causal = key
        cells = " ".join(f"{table[key][m]:12.1f}" if m in table[key] else f"{'-':>12}" for m in methods)
        print(f"{dname:<5} {D:>4} {S:>6} {'causal' if causal else 'full':<6} {cells}")

    # The kernels' variants (bench_attention.cu), if any: one lever changed each, f16 (x: exact,
    # p: pasa kernel alone, on a prepared K').
    for prefix, title in (("x:", "exact"), ("p:", "pasa (kernel alone)")):
        variants = sorted({r["method"] for r in rows if r["method"].startswith(prefix)},
                          key=lambda m: (m != prefix + "tuned", m))
        if not variants:
            continue
        extra = ["torch-flash"] if prefix == "x:" else ["pasa-exact", "pasa-pasa"]
        print(f"\n{title} variants, fp16, TFLOP/s")
        print(f"{'D':>4} {'S':>6} {'mask':<6} " + " ".join(f"{m:>11}" for m in variants + extra))
        for key in sorted(k for k in table if k[0] == "fp16" and any(m in table[k] for m in variants)):
            _, D, S, causal = key
            cells = " ".join(f"{table[key][m]:11.1f}" if m in table[key] else f"{'-':>11}"
                             for m in variants + extra)
            print(f"{D:>4} {S:>6} {'causal' if causal else 'full':<6} {cells}")

    # The targets: exact >= torch flash at S >= 4k; pasa >= 0.95 x exact.
    print("\nratios: exact / torch-flash, pasa / exact (fp16)")
    for key in sorted(k for k in table if k[0] in ("fp16", "bf16")):
        t = table[key]
        dname, D, S, causal = key
        r1 = t["pasa-exact"] / t["torch-flash"] if "pasa-exact" in t and "torch-flash" in t else float("nan")
        r2 = t["pasa-pasa"] / t["pasa-exact"] if "pasa-pasa" in t and "pasa-exact" in t else float("nan")
        print(f"{dname:<5} {D:>4} {S:>6} {'causal' if causal else 'full':<6} exact/flash {r1:5.2f}"
              + (f"  pasa/exact {r2:5.2f}" if r2 == r2 else ""))


if __name__ == "__main__":
    main()
