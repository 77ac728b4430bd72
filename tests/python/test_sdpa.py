# SPDX-License-Identifier: Apache-2.0
"""pasa.sdpa with torch's semantics, on NumPy arrays (the torch tests are in test_torch.py)."""

from __future__ import annotations

import numpy as np
import pytest

import pasa

from conftest import np_attention, qkv


def test_sdpa_is_top_left_causal(rng):
    q, k, v = qkv(rng, 2, 4, 4, 9, 30, 64)
    out = pasa.sdpa(q, k, v, is_causal=True)
    want, _ = np_attention(q, k, v, causal=True, alignment="top_left")
    np.testing.assert_allclose(out, want, atol=2e-5, rtol=0)


def test_sdpa_gqa_and_scale(rng):
    q, k, v = qkv(rng, 1, 8, 2, 17, 17, 64)
    out = pasa.sdpa(q, k, v, enable_gqa=True, scale=0.05)
    want, _ = np_attention(q, k, v, scale=0.05)
    np.testing.assert_allclose(out, want, atol=2e-5, rtol=0)


def test_sdpa_three_d(rng):
    q, k, v = (rng.standard_normal((3, 11, 64)).astype(np.float32) for _ in range(3))
    out = pasa.sdpa(q, k, v)
    assert out.shape == (3, 11, 64)
    want, _ = np_attention(q[:, None], k[:, None], v[:, None])
    np.testing.assert_allclose(out, want[:, 0], atol=2e-5, rtol=0)


def test_sdpa_policy(rng):
    q, k, v = qkv(rng, 1, 2, 2, 40, 40, 64, dtype=np.float16)
    np.testing.assert_array_equal(pasa.sdpa(q, k, v, policy="pasa"),
                                  pasa.attention(q, k, v, policy="pasa"))


def test_sdpa_errors(rng):
    q, k, v = qkv(rng, 1, 4, 2, 8, 8, 64)
    with pytest.raises(pasa.PasaError, match=r"^attn_mask: shape \(3, 8\) does not broadcast"):
        pasa.sdpa(q, k, v, attn_mask=np.ones((3, 8), bool), enable_gqa=True)
    with pytest.raises(pasa.PasaError, match=r"^dropout_p: pasa.sdpa has no dropout \(got 0.1\)"):
        pasa.sdpa(q, k, v, dropout_p=0.1, enable_gqa=True)
    with pytest.raises(pasa.PasaError, match=r"^key: 2 heads differ from query's 4; pass "
                                             r"enable_gqa=True"):
        pasa.sdpa(q, k, v)
    with pytest.raises(pasa.PasaError, match=r"^key: 3 K/V heads do not divide the 4 query heads"):
        pasa.sdpa(q, *qkv(rng, 1, 3, 3, 8, 8, 64)[1:], enable_gqa=True)
    with pytest.raises(pasa.PasaError, match=r"^query: expected a 4-D \[N, H, L, E\] or 3-D"):
        pasa.sdpa(q[0, 0], k, v)
    with pytest.raises(pasa.PasaError, match=r"^key: query, key and value must have the same rank"):
        pasa.sdpa(q, k[0], v, enable_gqa=True)
    with pytest.raises(pasa.PasaError, match=r"^value: shape .* differs from key's"):
        pasa.sdpa(q, k, v[..., :32], enable_gqa=True)
    with pytest.raises(pasa.PasaError, match=r"^is_causal: expected True or False, got 'False'"):
        pasa.sdpa(q, k, v, is_causal="False", enable_gqa=True)
    with pytest.raises(pasa.PasaError, match=r"^query: unsupported dtype float128"):
        pasa.sdpa(q.astype(np.longdouble), k, v, enable_gqa=True)
    with pytest.raises(pasa.PasaError, match=r"^q: unsupported dtype object"):
        pasa.attention(q.astype(object), k, v)


def test_sdpa_refuses_the_dtypes_torch_refuses(rng):
    q, k, v = qkv(rng, 1, 2, 2, 8, 8, 64)
    with pytest.raises(pasa.PasaError, match=r"^key/value: dtypes float16/float32 differ from query's float32"):
        pasa.sdpa(q, k.astype(np.float16), v)
    for mask in (np.zeros((8, 8), np.float16), np.zeros((8, 8), np.float64)):
        with pytest.raises(pasa.PasaError, match=rf"^attn_mask: dtype {mask.dtype} is neither bool, float32 "
                                                 r"nor the query's float32"):
            pasa.sdpa(q, k, v, attn_mask=mask)
    # what torch takes: a bool mask, a float32 one, and one of the query's dtype
    q16, k16, v16 = (x.astype(np.float16) for x in (q, k, v))
    for mask in (np.ones((8, 8), bool), np.zeros((8, 8), np.float32), np.zeros((8, 8), ">f4"),
                 np.zeros((8, 8), np.float16)):
        np.testing.assert_array_equal(pasa.sdpa(q16, k16, v16, attn_mask=mask), pasa.sdpa(q16, k16, v16))
