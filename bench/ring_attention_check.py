# SPDX-License-Identifier: Apache-2.0
"""One-GPU check of pasa.distributed: correctness of the ring and all-gather paths on the CUDA
kernels (NCCL, world size 1) and the overhead of the ring machinery against plain pasa.attention.

    python bench/ring_attention_check.py            # or: torchrun --nproc_per_node=1 bench/...

World size 1 still exercises the merge: in the zig-zag layout a rank holds two chunks, so its
queries attend to three (chunk, chunk) pairs merged by LSE. Several ranks cannot share one GPU
here (NCCL refuses two ranks on one device; gloo's send/recv take CPU tensors only), so the
multi-rank paths are checked on the CPU by tests/python/test_distributed.py.

Correctness rule (as in the CPU tests): the sharded run's max error against the fp64 reference is
at most twice the single-device kernel's plus 2 u_o + 8 u_fp32 times max|V|. Exits 1 on a failure.
Prints a short table last.
"""

from __future__ import annotations

import os
import sys
import tempfile

import numpy as np
import torch
import torch.distributed as dist

import pasa
from pasa import distributed as pd

SEED = 18
U = {"fp32": 2.0 ** -24, "fp16": 2.0 ** -11, "bf16": 2.0 ** -8}


def inputs(gen, heads_q, heads_kv, seq, dim):
    q = torch.randn(1, heads_q, seq, dim, generator=gen, device="cuda") + 0.5
    k = torch.randn(1, heads_kv, seq, dim, generator=gen, device="cuda")
    k += torch.linspace(0.0, 2.0, seq, device="cuda")[:, None]  # a key mean that grows along S
    v = torch.randn(1, heads_kv, seq, dim, generator=gen, device="cuda")
    return tuple(x.half() for x in (q, k, v))


def check_correctness(gen) -> list:
    rows = []
    q, k, v = inputs(gen, 8, 2, 1000, 128)
    for policy in ("exact", "pasa"):
        for causal in (False, True):
            o_ref = pasa.reference(q, k, v, policy=policy, causal=causal)
            single = pasa.attention(q, k, v, policy=policy, causal=causal)
            err_single = float(np.abs(single.double().cpu().numpy() - o_ref).max())
            atol = (2 * U[pasa.Policy(policy).o] + 8 * U["fp32"]) * float(v.abs().max())
            for fn in (pd.ring_attention, pd.allgather_attention):
                for zigzag in (False, True):
                    o = fn(q, k, v, policy=policy, causal=causal, zigzag=zigzag)
                    torch.cuda.synchronize()
                    err = float(np.abs(o.double().cpu().numpy() - o_ref).max())
                    ok = err <= 2 * err_single + atol
                    rows.append((policy, causal, fn.__name__, zigzag, err, err_single, ok))
    return rows


def time_ms(fn, iters=10) -> float:
    fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(iters):
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        stop.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(stop))
    return float(np.median(times))


def check_overhead(gen) -> list:
    rows = []
    q, k, v = inputs(gen, 32, 32, 32768, 128)
    for policy in ("exact", "pasa"):
        for causal in (False, True):
            plain = time_ms(lambda: pasa.attention(q, k, v, policy=policy, causal=causal))
            ring = time_ms(lambda: pd.ring_attention(q, k, v, policy=policy, causal=causal))
            zig = time_ms(lambda: pd.ring_attention(q, k, v, policy=policy, causal=causal,
                                                    zigzag=True))
            rows.append((policy, causal, plain, ring, zig))
    return rows


def main() -> int:
    if not torch.cuda.is_available() or not pasa.built_with_cuda:
        print("skipped: needs a CUDA GPU and a pasa build with the CUDA kernels")
        return 0
    if "RANK" not in os.environ:  # plain `python`: a one-process group of our own
        rendezvous = tempfile.mktemp(prefix="pasa-ring-")
        dist.init_process_group("nccl", init_method=f"file://{rendezvous}", rank=0, world_size=1)
    else:
        dist.init_process_group("nccl")
    torch.cuda.set_device(0)
    print(f"seed {SEED}, world size {dist.get_world_size()}, {torch.cuda.get_device_name()}")
    gen = torch.Generator(device="cuda").manual_seed(SEED)
    correctness = check_correctness(gen)
    overhead = check_overhead(gen)
    dist.destroy_process_group()

    print("\ncorrectness, B=1 H=8/2 (GQA) S=1000 D=128 fp16: max |O - O_fp64|")
    print(f"{'policy':8} {'causal':6} {'function':20} {'zigzag':6} {'sharded':>10} "
          f"{'single':>10} ok")
    for policy, causal, fn, zigzag, err, err_single, ok in correctness:
        print(f"{policy:8} {causal!s:6} {fn:20} {zigzag!s:6} {err:10.3e} {err_single:10.3e} "
              f"{'yes' if ok else 'NO'}")
    print("\noverhead of the ring machinery on 1 GPU, B=1 H=32 S=32768 D=128 fp16 (median ms)")
    print(f"{'policy':8} {'causal':6} {'attention':>10} {'ring':>10} {'ring zigzag':>12}")
    for policy, causal, plain, ring, zig in overhead:
        print(f"{policy:8} {causal!s:6} {plain:10.2f} {ring:10.2f} {zig:12.2f}")
    return 0 if all(row[-1] for row in correctness) else 1


if __name__ == "__main__":
    sys.exit(main())
