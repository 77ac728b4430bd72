# SPDX-License-Identifier: Apache-2.0
"""CUDA-event timing of several calls interleaved in one process, shared by the Python benchmarks
(python_compare.py, python_decode.py)."""
import statistics

import torch


def interleaved_ms(fns, warmup, runs, flush_l2=False):
    """Median ms of each zero-argument function, the functions taking turns within every round (in a
    rotated order, so that none is always first): `warmup` rounds, then `runs` timed ones. Nothing
    waits between calls: each call's host work overlaps the GPU work queued before it, so the events
    time the GPU, as in the C++ benchmark (a call that itself waits for the stream ends that overlap,
    and its wait shows in its time). flush_l2: before each call (outside its events) the GPU writes a
    buffer of twice its L2 cache, so that no call finds in L2 what the call before it read (methods
    that share tensors would otherwise gain from following each other, where they fit in L2)."""
    names = list(fns)
    scratch = None
    if flush_l2:
        l2_bytes = torch.cuda.get_device_properties(torch.cuda.current_device()).L2_cache_size
        scratch = torch.empty(2 * l2_bytes, dtype=torch.uint8, device="cuda")
    events = {name: [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
                     for _ in range(warmup + runs)] for name in names}
    torch.cuda.synchronize()
    torch.cuda._sleep(50_000_000)  # ~25 ms of queued GPU time, so the host starts ahead of the GPU
    for r in range(warmup + runs):
        for i in range(len(names)):
            name = names[(r + i) % len(names)]
            start, stop = events[name][r]
            if scratch is not None:
                scratch.zero_()
            start.record()
            fns[name]()
            stop.record()
    torch.cuda.synchronize()
    return {name: statistics.median(s.elapsed_time(e) for s, e in events[name][warmup:]) for name in names}
