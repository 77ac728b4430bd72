# SPDX-License-Identifier: Apache-2.0
"""Host time per eager ``pasa.attention`` call from Python (the issue's target: <= 15 us on the GPU).

Usage: python3 bench/python_host_overhead.py [calls]

With torch and an sm_90 GPU: a decode step (B 1, S_q 1, 32 query / 8 KV heads, 4096 keys, d 128,
bf16) on torch tensors, the calls queued without synchronizing, so the wall time is the host's; torch
SDPA's cuDNN backend timed the same way beside it. Without a GPU: NumPy arrays of one query and one key
on the CPU emulator (the call's fixed cost). Median over 15 rounds of `calls` calls.
"""
import statistics
import sys
import time

import numpy as np

import pasa


def per_call_us(fn, calls, drain):
    rounds = []
    for r in range(16):  # round 0 warms up
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        stop = time.perf_counter()
        drain()
        if r:
            rounds.append((stop - start) / calls * 1e6)
    return statistics.median(rounds)


def main():
    calls = int(sys.argv[1]) if len(sys.argv) > 1 else 200
    try:
        import torch
        gpu = torch.cuda.is_available() and pasa.built_with_cuda
    except ImportError:
        gpu = False
    if gpu:
        import torch.nn.functional as F
        from torch.nn.attention import SDPBackend, sdpa_kernel

        q = torch.randn(1, 32, 1, 128, device="cuda", dtype=torch.bfloat16)
        k, v = (torch.randn(1, 8, 4096, 128, device="cuda", dtype=torch.bfloat16) for _ in range(2))
        drain = torch.cuda.synchronize
        rows = [("pasa.attention exact", per_call_us(lambda: pasa.attention(q, k, v), calls, drain))]
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            rows.append(("torch SDPA cuDNN", per_call_us(
                lambda: F.scaled_dot_product_attention(q, k, v, enable_gqa=True), calls, drain)))
        where = torch.cuda.get_device_name()
    else:
        q, k, v = (np.full((1, 1, 1, 8), x, np.float32) for x in (0.25, 0.5, 0.75))
        rows = [("pasa.attention exact", per_call_us(lambda: pasa.attention(q, k, v), calls, lambda: None))]
        where = "CPU emulator, one query and one key"
    print(f"host time per eager call ({where}; median of 15 rounds of {calls} calls)")
    print("| call | us |\n|---|---|")
    for name, us in rows:
        print(f"| {name} | {us:.2f} |")


if __name__ == "__main__":
    main()
