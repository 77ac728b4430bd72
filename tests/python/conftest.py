# SPDX-License-Identifier: Apache-2.0
"""Shared helpers for the Python tests: fresh random inputs and a NumPy float64 attention."""

from __future__ import annotations

import numpy as np
import pytest


def np_attention(q, k, v, *, causal=False, alignment="bottom_right", scale=None, layout="bhsd"):
    """Softmax attention in float64, written directly from the definition.

    Returns (o, lse) with o in the inputs' layout and lse [B, H_q, S_q]. A fully masked row gives
    O = 0 and LSE = -inf (the library's convention).
    """
    q, k, v = (np.asarray(x, dtype=np.float64) for x in (q, k, v))
    if layout == "bshd":
        q, k, v = (x.transpose(0, 2, 1, 3) for x in (q, k, v))
    _, h_q, s_q, d = q.shape
    h_kv, s_kv = k.shape[1], k.shape[2]
    k = np.repeat(k, h_q // h_kv, axis=1)
    v = np.repeat(v, h_q // h_kv, axis=1)
    scale = 1.0 / np.sqrt(d) if scale is None else scale
    scores = scale * np.einsum("bhqd,bhkd->bhqk", q, k)
    if causal:
        rows = np.arange(s_q)[:, None]
        cols = np.arange(s_kv)[None, :]
        limit = rows + (s_kv - s_q) if alignment == "bottom_right" else rows
        scores = np.where(cols <= limit, scores, -np.inf)
    m = scores.max(axis=-1, keepdims=True)
    masked = np.isneginf(m)
    m_safe = np.where(masked, 0.0, m)
    p = np.exp(scores - m_safe)
    rowsum = np.where(masked, 1.0, p.sum(axis=-1, keepdims=True))
    o = np.where(masked, 0.0, np.einsum("bhqk,bhkd->bhqd", p, v) / rowsum)
    lse = np.where(masked, -np.inf, m_safe + np.log(rowsum))[..., 0]
    if layout == "bshd":
        o = o.transpose(0, 2, 1, 3)
    return o, lse


@pytest.fixture
def rng(request):
    """A generator seeded fresh each run; the seed is printed so a failure can be replayed."""
    seed = int(np.random.SeedSequence().entropy % (2**63))
    print(f"{request.node.name}: numpy seed {seed}")
    return np.random.default_rng(seed)


def randn(rng, shape, dtype=np.float32):
    """Standard normal values (never zeros) rounded to dtype."""
    return rng.standard_normal(shape).astype(dtype)


def qkv(rng, b=2, h_q=4, h_kv=None, s_q=33, s_kv=None, d=64, dtype=np.float32, layout="bhsd"):
    """Random q, k, v in the given layout."""
    h_kv = h_q if h_kv is None else h_kv
    s_kv = s_q if s_kv is None else s_kv
    if layout == "bhsd":
        shapes = [(b, h_q, s_q, d), (b, h_kv, s_kv, d), (b, h_kv, s_kv, d)]
    else:
        shapes = [(b, s_q, h_q, d), (b, s_kv, h_kv, d), (b, s_kv, h_kv, d)]
    return tuple(randn(rng, s, dtype) for s in shapes)
