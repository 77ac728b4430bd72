# SPDX-License-Identifier: Apache-2.0
"""Decoding through the public Python API: torch SDPA (cuDNN, flash) and pasa.attention on dense
tensors, pasa.attention_with_kvcache on a dense and on paged KV caches, interleaved in one process on
the same keys and values, eager and replayed as CUDA graphs.

Usage: python3 bench/python_decode.py [out_csv] [--fp16] [--blocks-in-order] [--batches=B,...]

Points: S_q = 1, 32 query / 8 KV heads, d = 128, bf16 (fp16 with --fp16: the fdpp policy's own input
format, which it then reads without converting), B 1 / 8 / 64, S_kv 4k / 16k / 32k, normal(0, 1)
inputs, no mask (S_q = 1). A point whose tensors do not fit in the GPU's free memory is skipped
(said on stderr). Methods:
  torch-cudnn, torch-flash  SDPA's backends on q [B, 32, 1, 128], k, v [B, 8, S_kv, 128]
                            (enable_gqa=True, else the backend's own head broadcast)
  torch-cudnn-bshd          torch-cudnn on the dense cache's memory ([B, S_kv, 8, 128], flash-attn's KV
                            cache layout) seen as [B, 8, S_kv, 128]
  attention                 pasa.attention, exact, on the same dense tensors
  kv-dense                  pasa.attention_with_kvcache, exact, dense cache [B, S_kv, 8, 128]
  kv-paged16, kv-paged64    the same on a paged cache of 16- / 64-position blocks, each sequence's
                            blocks shuffled over the whole pool (with --blocks-in-order: sequence b
                            owns blocks b n .. b n + n - 1 in order, so the table's reads alone
                            separate paged from dense)
  kv-paged16-fdpp           kv-paged16 under the fdpp policy
  kv-paged16-fdpp-all       the same with FlashDecoding++'s window narrowed to (-0.5, 0.5), which every
                            row leaves: each split runs its keys twice (the fallback's cost)
  kv-cap32k                 kv-dense in a cache of 32k positions a sequence (a server's cache sized
                            for its longest request), the keys in its first S_kv
Every cache holds the dense tensors' keys and values and is full (cache_seqlens = S_kv, no append)
but kv-cap32k's, so every method computes the same attention; each output is checked against the first
method's (2e-2 of its scale) and a disagreement is said on stderr. --batches=1,8 runs those batches only.

Eager: per round every method runs once in a rotated order, CUDA events around each call, nothing
waiting between calls, L2 flushed before each (a decode step's keys and values are not in L2 when a
layer runs; without the flush, B 1 4k's 17 MB stay there and methods on shared tensors gain from
following each other); the median of 30 rounds after 5 warm-up rounds (bench/interleaved.py). An
eager attention_with_kvcache copies cache_seqlens and block_table to the host to check them, waiting
for the stream: its eager time includes that wait and the check, and the call after it starts on an
idle GPU (its host time shows in its time). Graphs: each method captured once with torch.cuda.graph,
the replays timed the same way: the GPU's time alone.
TB/s = K and V bytes read / time = 2 B S_kv H_kv d 2 / t. Ratios are of TB/s under graphs (above 1:
the first is faster).
"""
import csv
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

import pasa
from interleaved import interleaved_ms

H_Q, H_KV, D = 32, 8, 128
BATCHES = (1, 8, 64)
SEQS = (4096, 16384, 32768)
CAPACITY = 32768  # kv-cap32k's positions a sequence
RECOMPUTE_ALL = "fdpp,window_lo=-0.5,window_hi=0.5"  # a window no row of normal(0, 1) scores stays in
WARMUP, RUNS = 5, 30
RATIOS = [("attention/cudnn", "attention", "torch-cudnn"), ("kv-dense/cudnn", "kv-dense", "torch-cudnn"),
          ("kv-dense/cudnn-bshd", "kv-dense", "torch-cudnn-bshd"),
          ("paged16/dense", "kv-paged16", "kv-dense"), ("paged64/dense", "kv-paged64", "kv-dense"),
          ("fdpp/exact", "kv-paged16-fdpp", "kv-paged16"),
          ("fdpp-all/fdpp", "kv-paged16-fdpp-all", "kv-paged16-fdpp"), ("cap32k/dense", "kv-cap32k", "kv-dense")]


def block_table(B, S, block, gen, in_order):
    """int32 [B, S / block]: the pool's blocks, S / block of them per sequence, in a random order (or in
    pool order)."""
    n = B * S // block
    ids = torch.arange(n, device="cuda") if in_order else torch.randperm(n, device="cuda", generator=gen)
    return ids.view(B, S // block).to(torch.int32)


def paged(dense_cache, table):
    """dense_cache [B, S, H, D] as a pool of blocks [B S / block, block, H, D] holding the same
    positions where the table says."""
    blocks, block = table.numel(), dense_cache.shape[1] // table.shape[1]
    pool = torch.empty((blocks, block) + tuple(dense_cache.shape[2:]), dtype=dense_cache.dtype, device="cuda")
    pool[table.flatten().long()] = dense_cache.reshape(blocks, block, *dense_cache.shape[2:])
    return pool


def methods(B, S, gen, dtype, blocks_in_order):
    """The calls of one point (outputs [B, H_q, 1, D] or, from the caches, [B, 1, H_q, D])."""
    q = torch.randn(B, H_Q, 1, D, device="cuda", dtype=dtype, generator=gen)
    k, v = (torch.randn(B, H_KV, S, D, device="cuda", dtype=dtype, generator=gen) for _ in range(2))
    q_bshd = q.view(B, 1, H_Q, D)  # the same memory: [B, H, 1, D] is [B, 1, H, D] when S_q = 1
    k_cache, v_cache = (x.transpose(1, 2).contiguous() for x in (k, v))
    lengths = torch.full((B,), S, dtype=torch.int32, device="cuda")
    fns = {}
    for name, backend in (("torch-cudnn", SDPBackend.CUDNN_ATTENTION), ("torch-flash", SDPBackend.FLASH_ATTENTION)):
        for gqa in ({"enable_gqa": True}, {}):
            def sdpa(backend=backend, gqa=gqa):
                with sdpa_kernel(backend):
                    return F.scaled_dot_product_attention(q, k, v, **gqa)
            try:
                sdpa()
            except RuntimeError as e:
                print(f"# {name} {'with' if gqa else 'without'} enable_gqa at B {B} S_kv {S}: "
                      f"{str(e).splitlines()[0]}", file=sys.stderr)
                continue
            fns[name] = sdpa
            break
    k_bshd, v_bshd = (x.transpose(1, 2) for x in (k_cache, v_cache))

    def sdpa_bshd():
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            return F.scaled_dot_product_attention(q, k_bshd, v_bshd, enable_gqa=True)
    fns["torch-cudnn-bshd"] = sdpa_bshd
    fns["attention"] = lambda: pasa.attention(q, k, v)

    def kvcache(kc, vc, table=None, policy="exact"):
        return lambda: pasa.attention_with_kvcache(q_bshd, kc, vc, cache_seqlens=lengths, block_table=table,
                                                   policy=policy)

    fns["kv-dense"] = kvcache(k_cache, v_cache)
    roomy = [torch.zeros((B, CAPACITY, H_KV, D), dtype=dtype, device="cuda") for _ in range(2)]
    for cache, x in zip(roomy, (k_cache, v_cache)):
        cache[:, :S] = x
    fns["kv-cap32k"] = kvcache(*roomy)
    for block in (16, 64):
        table = block_table(B, S, block, gen, blocks_in_order)
        k_pool, v_pool = paged(k_cache, table), paged(v_cache, table)
        fns[f"kv-paged{block}"] = kvcache(k_pool, v_pool, table)
        if block == 16:
            fns["kv-paged16-fdpp"] = kvcache(k_pool, v_pool, table, "fdpp")
            fns["kv-paged16-fdpp-all"] = kvcache(k_pool, v_pool, table, RECOMPUTE_ALL)
    return fns


def run_once_and_check(fns, B, S):
    """Runs each method once; drops (and says) those that fail, and says which disagree."""
    outs = {}
    for name in list(fns):
        try:
            outs[name] = fns[name]()
        except Exception as e:  # noqa: BLE001 (torch's and pasa's own error types)
            print(f"# {name} skipped at B {B} S_kv {S}: {type(e).__name__}: {e}", file=sys.stderr)
            del fns[name]
    if outs:
        flat = (B, H_Q, D)  # either output layout, S_q being 1
        first, want = next(iter(outs.items()))
        want = want.float().reshape(flat)
        scale = want.abs().max().item()
        for name, out in outs.items():
            err = (out.float().reshape(flat) - want).abs().max().item()
            if not err <= 2e-2 * scale:
                print(f"# {name} differs from {first} at B {B} S_kv {S}: max error {err:.3g}, scale {scale:.3g}",
                      file=sys.stderr)


def graphs(fns, B, S):
    """Each method captured once in a CUDA graph; the replays (methods whose capture fails are said)."""
    replays = {}
    for name, fn in fns.items():
        graph = torch.cuda.CUDAGraph()
        try:
            with torch.cuda.graph(graph):
                fn()
        except Exception as e:  # noqa: BLE001
            print(f"# {name} not captured at B {B} S_kv {S}: {type(e).__name__}: {e}", file=sys.stderr)
            continue
        replays[name] = graph.replay
    return replays


def fits(B, S):
    """Whether a point's tensors fit: K and V dense, as a dense cache and as two paged ones."""
    kv_bytes = 2 * B * S * H_KV * D * 2
    free, _ = torch.cuda.mem_get_info()
    return 4 * kv_bytes + kv_bytes * CAPACITY // S + (1 << 30) < free


def bench(dtype, blocks_in_order, batches):
    rows = []
    for B in batches:
        for S in SEQS:
            torch.cuda.empty_cache()
            if not fits(B, S):
                print(f"# B {B} S_kv {S} skipped: its tensors do not fit in the GPU's free memory", file=sys.stderr)
                continue
            fns = methods(B, S, torch.Generator(device="cuda").manual_seed(B * S), dtype, blocks_in_order)
            run_once_and_check(fns, B, S)
            kv_bytes = 2.0 * B * S * H_KV * D * 2
            for mode, calls in (("eager", fns), ("graph", graphs(fns, B, S))):
                for name, ms in interleaved_ms(calls, WARMUP, RUNS, flush_l2=True).items():
                    rows.append({"B": B, "S_kv": S, "method": name, "mode": mode, "us": f"{ms * 1e3:.2f}",
                                 "tbps": f"{kv_bytes / (ms * 1e-3) / 1e12:.3f}"})
                print(f"# B {B} S_kv {S} {mode} done", file=sys.stderr, flush=True)
            del fns, calls
    return rows


def print_tables(rows, dtype_name, blocks):
    table = {}
    for r in rows:
        table.setdefault((r["B"], r["S_kv"], r["mode"]), {})[r["method"]] = (float(r["us"]), float(r["tbps"]))
    names = list(dict.fromkeys(r["method"] for r in rows))
    print(f"\ndecode, S_q 1, {H_Q}/{H_KV} heads, d {D}, {dtype_name}, paged blocks {blocks} (median of {RUNS}, interleaved; "
          f"{torch.cuda.get_device_name()}; torch {torch.__version__}, cuDNN {torch.backends.cudnn.version()}; "
          f"pasa {pasa.__version__})")
    for title, column, digits in (("microseconds", 0, 2), ("TB/s of K and V read", 1, 3)):
        print(f"\n{title}")
        print(f"{'B':>3}{'S_kv':>7} {'mode':<6}" + "".join(f"{n:>18}" for n in names))
        for (B, S, mode), t in table.items():
            cells = (t[n][column] if n in t else float("nan") for n in names)
            print(f"{B:>3}{S:>7} {mode:<6}" + "".join(f"{c:18.{digits}f}" for c in cells))
    print("\nratios of TB/s under CUDA graphs (above 1: the first is faster)")
    print(f"{'B':>3}{'S_kv':>7}" + "".join(f"{r[0]:>20}" for r in RATIOS))
    for (B, S, mode), t in table.items():
        if mode == "graph":
            cells = [t[a][1] / t[b][1] if a in t and b in t else float("nan") for _, a, b in RATIOS]
            print(f"{B:>3}{S:>7}" + "".join(f"{c:20.3f}" for c in cells))


def main():
    if not (torch.cuda.is_available() and pasa.built_with_cuda):
        sys.exit("python_decode.py needs a CUDA GPU and a pasa build with the CUDA kernels")
    flags = ("--fp16", "--blocks-in-order")
    fp16, in_order = (f in sys.argv[1:] for f in flags)
    batches = BATCHES
    for a in sys.argv[1:]:
        if a.startswith("--batches="):
            try:
                batches = tuple(int(b) for b in a.split("=", 1)[1].split(","))
            except ValueError:
                sys.exit(f"{a}: want --batches=B[,B...] with whole numbers")
            if not batches or min(batches) < 1:
                sys.exit(f"{a}: every batch must be at least 1")
    paths = [a for a in sys.argv[1:] if a not in flags and not a.startswith("--batches=")]
    rows = bench(torch.float16 if fp16 else torch.bfloat16, in_order, batches)
    if not rows:
        sys.exit("no point ran")
    print_tables(rows, "fp16" if fp16 else "bf16", "in order" if in_order else "shuffled")
    if paths:
        with open(paths[0], "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(rows[0]))
            w.writeheader()
            w.writerows(rows)


if __name__ == "__main__":
    main()
