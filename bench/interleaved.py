# SPDX-License-Identifier: Apache-2.0
"""CUDA-event timing of several calls interleaved in one process, shared by the Python benchmarks
(python_compare.py, python_decode.py)."""
import statistics

import torch


def interleaved_ms(fns, warmup, runs):
    """Median ms of each zero-argument function, the functions taking turns within every round (in a
    rotated order, so that none is always first): `warmup` rounds, then `runs` timed ones. Nothing
    waits between calls: each call's host work overlaps the GPU work queued before it, so the events
    time the GPU, as in the C++ benchmark (a call that itself waits for the stream ends that overlap,
    and its wait shows in its time)."""
    names = list(fns)
    events = {name: [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
                     for _ in range(warmup + runs)] for name in names}
    torch.cuda.synchronize()
    torch.cuda._sleep(50_000_000)  # ~25 ms of queued GPU time, so the host starts ahead of the GPU
    for r in range(warmup + runs):
        for i in range(len(names)):
            name = names[(r + i) % len(names)]
            start, stop = events[name][r]
            start.record()
            fns[name]()
            stop.record()
    torch.cuda.synchronize()
    return {name: statistics.median(s.elapsed_time(e) for s, e in events[name][warmup:]) for name in names}
