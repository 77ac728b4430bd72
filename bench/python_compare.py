# SPDX-License-Identifier: Apache-2.0
"""pasa's prefill policies against torch SDPA (cuDNN, flash), SageAttention2 and cuDNN's FP8 attention,
interleaved in one process on the same tensors, through the public Python API, then the sage8 and
sage_fp8 accuracy check.

Usage: python3 bench/python_compare.py [out_csv] [--quick] [--head-dims 96,256]

Points: head dims 64 / 128 (or those of --head-dims), S = 1k / 4k / 16k (--quick: 1k / 4k), B * S = 32k tokens, H * D = 2048, causal and not,
fp16 and bf16, BHSD contiguous, normal(0, 1) inputs. Per point every method runs once per round, in
turn (the order rotated every round), for 5 warm-up and 30 timed rounds, CUDA events around each call
and nothing waiting between calls; the median of each is kept.
TFLOP/s = 4 B H S^2 D / t, halved for causal. Each point also records the median SM clock and power
while it ran (gpu_clock.py): under the GPU's power cap the clock depends on which kernels run.
Each method's quantization or prepass is inside its call (pasa's sage8 and SageAttention2 alike),
except cuDNN FP8's (per-tensor e4m3 Q, K, V quantized once per point, untimed, as the issue's
reference numbers were taken; cudnn_fp8.py). SageAttention2
(`sageattention`) and cuDNN FP8 (`cudnn`, the nvidia-cudnn-frontend package) are timed where they
are importable; they are peers, never dependencies.

Accuracy: relative RMSE and cosine similarity against an fp64 reference, sage8, sage_fp8, SageAttention2 and
cuDNN FP8 (its O scaled by a first call's amax, so that e4m3 O uses its range) on normal(0, 1)
inputs and on SageAttention2's channel-outlier inputs (a same-signed offset of 20 in 4 channels of Q
and K), B 1, H 8, S 4096, both head dims, fp16.
"""
import csv
import functools
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

import cudnn_fp8
import pasa
from gpu_clock import ClockSampler, nvidia_smi_id
from interleaved import interleaved_ms

TOKENS, HIDDEN = 32768, 2048
WARMUP, RUNS = 5, 30
POLICIES = ("exact", "pasa", "pasa_fp16acc", "sage8", "sage_fp8")

try:
    from sageattention import sageattn
except ImportError:
    sageattn = None


def methods(causal):
    def torch_backend(backend):
        def run(q, k, v):
            with sdpa_kernel(backend):
                return F.scaled_dot_product_attention(q, k, v, is_causal=causal)
        return run

    m = {f"pasa-{p}": (lambda p: lambda q, k, v: pasa.attention(q, k, v, policy=p, causal=causal))(p) for p in POLICIES}
    m["torch-cudnn"] = torch_backend(SDPBackend.CUDNN_ATTENTION)
    m["torch-flash"] = torch_backend(SDPBackend.FLASH_ATTENTION)
    if sageattn is not None:
        m["sage2"] = lambda q, k, v: sageattn(q, k, v, tensor_layout="HND", is_causal=causal)
    return m


def speed(points, head_dims, out_csv):
    rows = []
    for dtype in (torch.float16, torch.bfloat16):
        for D in head_dims:
            for S in points:
                for causal in (False, True):
                    B, H = TOKENS // S, HIDDEN // D
                    gen = torch.Generator(device="cuda").manual_seed(S + D)
                    q, k, v = (torch.randn(B, H, S, D, device="cuda", dtype=dtype, generator=gen) for _ in range(3))
                    fns = methods(causal)
                    if cudnn_fp8.available():
                        try:
                            fns["cudnn-fp8"] = cudnn_fp8.Fp8Attention(q, k, v, causal)
                        except Exception as e:  # noqa: BLE001 (the frontend's own error types)
                            print(f"# cudnn-fp8 skipped at D {D} S {S}: {type(e).__name__}: {e}", file=sys.stderr)
                    for name in list(fns):  # a method that cannot run this point is left out, said once
                        try:
                            fns[name](q, k, v)
                        except Exception as e:  # noqa: BLE001 (a peer's own error types)
                            print(f"# {name} skipped at D {D} S {S}: {type(e).__name__}: {e}", file=sys.stderr)
                            del fns[name]
                    with ClockSampler(nvidia_smi_id(q.device.index)) as clock:
                        ms = interleaved_ms({name: functools.partial(fn, q, k, v) for name, fn in fns.items()},
                                            WARMUP, RUNS)
                    sm = clock.summary()
                    flops = 4.0 * B * H * S * S * D / (2 if causal else 1)
                    dt = "fp16" if dtype == torch.float16 else "bf16"
                    for name, t in ms.items():
                        rows.append({"dtype": dt, "D": D, "S": S, "mask": "causal" if causal else "full",
                                     "method": name, "ms": f"{t:.4f}", "tflops": f"{flops / t / 1e9:.1f}",
                                     "sm_mhz": "" if sm is None else f"{sm[0]:.0f}",
                                     "power_w": "" if sm is None or sm[2] is None else f"{sm[2]:.0f}",
                                     "clock_samples": 0 if sm is None else sm[4]})
                    del q, k, v
    with open(out_csv, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    return rows


def print_tables(rows):
    table, clocks = {}, {}
    for r in rows:
        key = (r["dtype"], r["D"], r["S"], r["mask"])
        table.setdefault(key, {})[r["method"]] = float(r["tflops"])
        clocks[key] = r["sm_mhz"] or "-"
    names = sorted({r["method"] for r in rows})
    print(f"\nTFLOP/s (median of {RUNS}, interleaved; {torch.cuda.get_device_name()}; torch {torch.__version__}); "
          f"the median SM clock while the point ran")
    print(f"{'dtype':<6}{'D':>4}{'S':>7} {'mask':<7}" + "".join(f"{n:>13}" for n in names) + f"{'SM MHz':>8}")
    for key, t in table.items():
        print(f"{key[0]:<6}{key[1]:>4}{key[2]:>7} {key[3]:<7}" + "".join(f"{t.get(n, float('nan')):13.1f}" for n in names)
              + f"{clocks[key]:>8}")
    ratios = [("exact/cudnn", "pasa-exact", "torch-cudnn"), ("pasa/exact", "pasa-pasa", "pasa-exact"),
              ("fp16acc/exact", "pasa-pasa_fp16acc", "pasa-exact"),
              ("sage8/cudnn", "pasa-sage8", "torch-cudnn"), ("sage8/sage2", "pasa-sage8", "sage2"),
              ("sage8/cudnn8", "pasa-sage8", "cudnn-fp8"), ("fp8/cudnn8", "pasa-sage_fp8", "cudnn-fp8"),
              ("fp8/sage8", "pasa-sage_fp8", "pasa-sage8")]
    print("\nratios")
    print(f"{'dtype':<6}{'D':>4}{'S':>7} {'mask':<7}" + "".join(f"{r[0]:>13}" for r in ratios))
    for key, t in table.items():
        cells = [t[a] / t[b] if a in t and b in t else float("nan") for _, a, b in ratios]
        print(f"{key[0]:<6}{key[1]:>4}{key[2]:>7} {key[3]:<7}" + "".join(f"{c:13.2f}" for c in cells))


def accuracy():
    print("\naccuracy against fp64 (fp16 inputs, B 1, H 8, S 4096): relative RMSE / CosSim")
    for D in (64, 128):
        for inputs in ("normal", "outliers"):
            gen = torch.Generator(device="cuda").manual_seed(7 + D)
            q, k, v = (torch.randn(1, 8, 4096, D, device="cuda", dtype=torch.float64, generator=gen) for _ in range(3))
            if inputs == "outliers":
                channels = torch.randperm(D, generator=torch.Generator().manual_seed(D))[:4].cuda()
                q[..., channels] += 20.0
                k[..., channels] += 20.0
            q16, k16, v16 = (x.half() for x in (q, k, v))
            ref = F.scaled_dot_product_attention(q16.double(), k16.double(), v16.double())
            outs = {f"pasa-{p}": pasa.attention(q16, k16, v16, policy=p) for p in ("sage8", "sage_fp8")}
            if sageattn is not None:
                outs["sage2"] = sageattn(q16, k16, v16, tensor_layout="HND", is_causal=False)
            if cudnn_fp8.available():
                outs["cudnn-fp8"] = cudnn_fp8.accurate_output(q16, k16, v16)
            cells = []
            for name, o in outs.items():
                err = o.double() - ref
                rmse = (err.pow(2).mean() / ref.pow(2).mean()).sqrt().item()
                cos = F.cosine_similarity(o.double().flatten(), ref.flatten(), dim=0).item()
                cells.append(f"{name} {rmse:.2e} / {cos:.5f}")
            print(f"D {D:>3} {inputs:<9}" + "   ".join(cells))


def main():
    argv = sys.argv[1:]
    head_dims = (64, 128)
    if "--head-dims" in argv:
        at = argv.index("--head-dims")
        if at + 1 == len(argv):
            raise SystemExit("--head-dims needs a value, e.g. --head-dims 96,256")
        head_dims = tuple(int(d) for d in argv[at + 1].split(","))
        del argv[at:at + 2]
    args = [a for a in argv if not a.startswith("--")]
    out_csv = args[0] if args else "python_compare.csv"
    points = (1024, 4096) if "--quick" in argv else (1024, 4096, 16384)
    if sageattn is None:
        print("# SageAttention2 (sageattention) is not importable: its columns are left out", file=sys.stderr)
    if not cudnn_fp8.available():
        print("# cuDNN FP8 (cudnn, nvidia-cudnn-frontend) is not importable: its columns are left out", file=sys.stderr)
    print_tables(speed(points, head_dims, out_csv))
    accuracy()


if __name__ == "__main__":
    main()
