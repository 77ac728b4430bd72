# SPDX-License-Identifier: Apache-2.0
"""The serving layouts from Python (flash-attn's names): every sequence of a packed (varlen) or
KV-cache call equals pasa.attention on that sequence alone, bit for bit; bad batches raise PasaError
before anything is written."""

from __future__ import annotations

import numpy as np
import pytest

import pasa

from conftest import randn

PRESETS = ["exact", "fa16", "pasa", "sage8", "fdpp"]


def dense(q, k, v, **kwargs):
    """pasa.attention on one sequence given as [S, H, D] arrays; (o [S, H, D], lse [H, S])."""
    if k.shape[0] == 0:  # no key at all: every row fully masked
        return np.zeros(q.shape, np.float32), np.full((q.shape[1], q.shape[0]), -np.inf, np.float32)
    o, lse = pasa.attention(q[None], k[None], v[None], layout="bshd", return_lse=True, **kwargs)
    return o[0], lse[0]


@pytest.mark.parametrize("policy", PRESETS)
@pytest.mark.parametrize("causal", [False, True])
def test_varlen_equals_each_dense_sequence(rng, policy, causal):
    lengths = [(5, 9), (0, 3), (17, 17), (4, 0), (1, 70), (9, 4)]  # empty, S_q > S_kv, one token
    cu_q = np.cumsum([0] + [n for n, _ in lengths]).astype(np.int32)
    cu_k = np.cumsum([0] + [n for _, n in lengths]).astype(np.int32)
    q = randn(rng, (cu_q[-1], 4, 32), np.float16)
    k = randn(rng, (cu_k[-1], 2, 32), np.float16)
    v = randn(rng, (cu_k[-1], 2, 32), np.float16)
    out, lse = pasa.attention(q, k, v, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k,
                              max_seqlen_q=17, max_seqlen_k=70, causal=causal, policy=policy,
                              return_lse=True)
    assert out.shape == q.shape and out.dtype == np.float16 and lse.shape == (4, cu_q[-1])
    for b in range(len(lengths)):
        qs, ks = slice(cu_q[b], cu_q[b + 1]), slice(cu_k[b], cu_k[b + 1])
        if cu_q[b] == cu_q[b + 1]:
            continue
        want, want_lse = dense(q[qs], k[ks], v[ks], causal=causal, policy=policy)
        np.testing.assert_array_equal(out[qs], want.astype(out.dtype))
        np.testing.assert_array_equal(lse[:, qs], want_lse)


def gather(cache, table, b, length):
    """Sequence b's first `length` positions of a paged [blocks, block_size, H, D] cache."""
    block_size = cache.shape[1]
    return np.stack([cache[table[b, p // block_size], p % block_size] for p in range(length)]) \
        if length else cache[:0, 0]


@pytest.mark.parametrize("policy", PRESETS)
def test_paged_cache_with_append_equals_each_dense_sequence(rng, policy):
    # Block size 4; sequence 0 holds 8 (two full blocks: the append starts block 5); sequence 1
    # holds 6 and shares block 1 with sequence 0 as a prefix; sequence 2 starts empty.
    k_cache = randn(rng, (12, 4, 2, 32), np.float16)
    v_cache = randn(rng, (12, 4, 2, 32), np.float16)
    table = np.array([[1, 4, 5, -1], [1, 3, 9, -1], [6, -1, -1, -1]], np.int32)
    seqlens = np.array([8, 6, 0], np.int32)
    q = randn(rng, (3, 2, 4, 32), np.float16)
    k_new, v_new = randn(rng, (3, 3, 2, 32), np.float16), randn(rng, (3, 3, 2, 32), np.float16)
    before = k_cache.copy()
    out, lse = pasa.attention_with_kvcache(q, k_cache, v_cache, k_new, v_new, cache_seqlens=seqlens,
                                           block_table=table, causal=True, policy=policy,
                                           return_softmax_lse=True)
    assert out.shape == q.shape and lse.shape == (3, 4, 2)
    for b in range(3):
        for i in range(3):
            p = seqlens[b] + i
            np.testing.assert_array_equal(k_cache[table[b, p // 4], p % 4], k_new[b, i])
            np.testing.assert_array_equal(v_cache[table[b, p // 4], p % 4], v_new[b, i])
        n = seqlens[b] + 3
        want, want_lse = dense(q[b], gather(k_cache, table, b, n), gather(v_cache, table, b, n),
                               causal=True, policy=policy)
        np.testing.assert_array_equal(out[b], want.astype(out.dtype))
        np.testing.assert_array_equal(lse[b], want_lse)
    np.testing.assert_array_equal(k_cache[[1, 4]], before[[1, 4]])  # cached positions untouched


def test_dense_cache_without_append_and_one_int_length(rng):
    k_cache = randn(rng, (2, 13, 2, 32))
    v_cache = randn(rng, (2, 13, 2, 32))
    q = randn(rng, (2, 1, 4, 32))
    out = pasa.attention_with_kvcache(q, k_cache, v_cache, cache_seqlens=11, softmax_scale=0.2)
    for b in range(2):
        want, _ = dense(q[b], k_cache[b, :11], v_cache[b, :11], scale=0.2)
        np.testing.assert_array_equal(out[b], want)


def test_bad_batches_raise_before_writing(rng):
    q = randn(rng, (7, 4, 32))
    k = randn(rng, (7, 2, 32))
    out = np.full(q.shape, np.nan, np.float32)
    with pytest.raises(pasa.PasaError, match=r"cu_seqlens_q: decreases"):
        pasa.attention(q, k, k, cu_seqlens_q=np.array([0, 5, 3], np.int32),
                       cu_seqlens_k=np.array([0, 3, 7], np.int32), max_seqlen_q=7, max_seqlen_k=7,
                       out=out)
    assert np.isnan(out).all()
    with pytest.raises(pasa.PasaError, match="max_seqlen_q and max_seqlen_k together"):
        pasa.attention(q, k, k, cu_seqlens_q=np.array([0, 7], np.int32),
                       cu_seqlens_k=np.array([0, 7], np.int32))
    with pytest.raises(pasa.PasaError, match="no window_size, softcap or attn_mask"):
        pasa.attention(q, k, k, cu_seqlens_q=np.array([0, 7], np.int32),
                       cu_seqlens_k=np.array([0, 7], np.int32), max_seqlen_q=7, max_seqlen_k=7,
                       softcap=30.0)
    with pytest.raises(pasa.PasaError, match="cu_seqlens_q: expected integers"):
        pasa.attention(q, k, k, cu_seqlens_q=np.array([0.0, 7.0]),
                       cu_seqlens_k=np.array([0, 7], np.int32), max_seqlen_q=7, max_seqlen_k=7)

    k_cache = randn(rng, (4, 4, 2, 32))
    before = k_cache.copy()
    q4 = randn(rng, (2, 1, 4, 32))
    new = randn(rng, (2, 1, 2, 32))
    with pytest.raises(pasa.PasaError, match=r"block_table: \[1, 1\] = 4 is outside \[0, 4\)"):
        pasa.attention_with_kvcache(q4, k_cache, k_cache.copy(), new, new, cache_seqlens=[2, 5],
                                    block_table=np.array([[0, 1], [2, 4]], np.int32))
    with pytest.raises(pasa.PasaError, match="appending 1 needs 9"):
        pasa.attention_with_kvcache(q4, k_cache, k_cache.copy(), new, new, cache_seqlens=[2, 8],
                                    block_table=np.array([[0, 1], [2, 3]], np.int32))
    np.testing.assert_array_equal(k_cache, before)
