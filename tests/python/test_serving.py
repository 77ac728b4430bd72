# SPDX-License-Identifier: Apache-2.0
"""The serving layouts from Python (flash-attn's names): every sequence of a packed (varlen) or
KV-cache call equals pasa.attention on that sequence alone, bit for bit; bad batches raise PasaError
before anything is written. On a GPU (torch CUDA tensors), the same calls against the CPU emulator
on copies of the inputs, CUDA-graph replay with new cache lengths, and the device checks."""

from __future__ import annotations

import time

import numpy as np
import pytest

import pasa

from conftest import randn

try:
    import torch
except ImportError:
    torch = None


def _no_gpu_reason():
    if torch is None:
        return "torch is not installed"
    if not torch.cuda.is_available():
        return "no CUDA device"
    if not pasa.built_with_cuda:
        return "this pasa build has no CUDA kernels (built without nvcc)"
    return ""


gpu = pytest.mark.skipif(bool(_no_gpu_reason()), reason=_no_gpu_reason() or "a GPU is present")

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


def test_a_broadcast_block_table_costs_the_columns_read(rng):
    # A table broadcast to 2^31 - 1 columns, of which the call reads two: it was copied whole (16 GiB,
    # the process killed for memory), and checked element by element. Now cut to what is read.
    k_cache, v_cache = randn(rng, (3, 4, 1, 16)), randn(rng, (3, 4, 1, 16))
    q = randn(rng, (2, 1, 1, 16))
    seqlens = np.array([5, 7], np.int32)
    whole = np.broadcast_to(np.array([[2]], np.int32), (2, 2**31 - 1))
    start = time.monotonic()
    got = pasa.attention_with_kvcache(q, k_cache, v_cache, cache_seqlens=seqlens, block_table=whole)
    assert time.monotonic() - start < 5.0
    want = pasa.attention_with_kvcache(q, k_cache, v_cache, cache_seqlens=seqlens,
                                       block_table=np.full((2, 2), 2, np.int32))
    np.testing.assert_array_equal(got, want)
    # (a table too short keeps its own columns, and the call says what they hold)
    with pytest.raises(pasa.PasaError, match=r"^cache_seqlens: sequence 1 holds 9 positions; .* the cache's 8"):
        pasa.attention_with_kvcache(q, k_cache, v_cache, cache_seqlens=np.array([5, 9], np.int32),
                                    block_table=np.full((2, 2), 2, np.int32))


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


def test_appends_that_alias_the_cache_raise_before_writing(rng):
    k_cache, v_cache = randn(rng, (1, 6, 1, 8)), randn(rng, (1, 6, 1, 8))
    before = k_cache.copy()
    q = randn(rng, (1, 1, 1, 8))
    with pytest.raises(pasa.PasaError, match="k_cache: its memory overlaps k's"):
        pasa.attention_with_kvcache(q, k_cache, v_cache, k_cache[:, 1:3], v_cache[:, 1:3].copy(),
                                    cache_seqlens=2)
    new = randn(rng, (1, 1, 1, 8))
    with pytest.raises(pasa.PasaError, match="v_cache: is k_cache"):
        pasa.attention_with_kvcache(q, k_cache, k_cache, new, new.copy(), cache_seqlens=2)
    np.testing.assert_array_equal(k_cache, before)
    # v_cache one position into k_cache: the new values would land on keys.
    pool = randn(rng, (1, 7, 1, 8))
    pool_before = pool.copy()
    with pytest.raises(pasa.PasaError, match="v_cache: shares elements with k_cache"):
        pasa.attention_with_kvcache(q, pool[:, :6], pool[:, 1:], new, new.copy(), cache_seqlens=2)
    np.testing.assert_array_equal(pool, pool_before)


def test_caches_may_be_the_two_halves_of_one_buffer(rng):
    # FlashInfer's paged layout: one pool [blocks, 2, block_size, H, D], keys and values interleaved.
    pool = randn(rng, (3, 2, 4, 2, 8))
    q, new_k, new_v = randn(rng, (1, 1, 2, 8)), randn(rng, (1, 1, 2, 8)), randn(rng, (1, 1, 2, 8))
    table = np.array([[2, 0]], np.int32)
    got = pasa.attention_with_kvcache(q, pool[:, 0], pool[:, 1], new_k, new_v, cache_seqlens=5,
                                      block_table=table)
    np.testing.assert_array_equal(pool[0, 0, 1], new_k[0, 0])  # position 5: block 0, slot 1
    np.testing.assert_array_equal(pool[0, 1, 1], new_v[0, 0])
    k_dense, v_dense = pool[[2, 0], 0].reshape(1, 8, 2, 8), pool[[2, 0], 1].reshape(1, 8, 2, 8)
    want = pasa.attention_with_kvcache(q, k_dense.copy(), v_dense.copy(), cache_seqlens=6)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)


def test_read_only_caches_serve_calls_without_an_append(rng):
    k_cache, v_cache = randn(rng, (2, 9, 2, 16)), randn(rng, (2, 9, 2, 16))
    q = randn(rng, (2, 1, 4, 16))
    want = pasa.attention_with_kvcache(q, k_cache, v_cache, cache_seqlens=[9, 4])
    for cache in (k_cache, v_cache):
        cache.setflags(write=False)
    np.testing.assert_array_equal(pasa.attention_with_kvcache(q, k_cache, v_cache, cache_seqlens=[9, 4]), want)
    new = randn(rng, (2, 1, 2, 16))
    with pytest.raises(pasa.PasaError, match="k_cache: expected a writable array .*appending k and v writes it"):
        pasa.attention_with_kvcache(q, k_cache, v_cache, new, new.copy(), cache_seqlens=[3, 4])


def test_broadcast_caches_serve_calls_without_an_append(rng):
    # docs/api.md: inputs may broadcast. A cache only read is one (on the CPU); a cache appended into
    # is written, and its strides must give each position its own element.
    k_cache, v_cache = randn(rng, (4, 4, 2, 8)), randn(rng, (4, 4, 2, 8))
    q, table, lengths = randn(rng, (2, 1, 4, 8)), np.array([[0, 1], [2, 3]], np.int32), np.array([1, 4], np.int32)
    broadcast = np.broadcast_to(k_cache[:1], k_cache.shape)  # block stride 0
    got = pasa.attention_with_kvcache(q, broadcast, v_cache, cache_seqlens=lengths, block_table=table)
    want = pasa.attention_with_kvcache(q, broadcast.copy(), v_cache, cache_seqlens=lengths, block_table=table)
    np.testing.assert_array_equal(got, want)
    writable = np.lib.stride_tricks.as_strided(k_cache, k_cache.shape, (0,) + k_cache.strides[1:])
    new = randn(rng, (2, 1, 2, 8))
    with pytest.raises(pasa.PasaError, match=r"^k_cache: stride of the block \(or batch\) dimension is 0 "
                                             r"\(the cache is written"):
        pasa.attention_with_kvcache(q, writable, v_cache, new, new.copy(), cache_seqlens=lengths,
                                    block_table=table)


def test_new_varlen_outputs_hold_zero_and_minus_inf_where_no_sequence_is(rng):
    q = randn(rng, (6, 2, 8))
    cu = np.array([1, 3, 5], np.int32)  # tokens 0 and 5 belong to no sequence
    out, lse = pasa.attention(q, q, q, cu_seqlens_q=cu, cu_seqlens_k=cu, max_seqlen_q=2, max_seqlen_k=2,
                              return_lse=True)
    for t in (0, 5):
        assert (out[t] == 0).all() and (lse[:, t] == -np.inf).all()
    want, _ = dense(q[1:3], q[1:3], q[1:3])
    np.testing.assert_array_equal(out[1:3], want)


def test_varlen_errors_name_the_packed_arrays(rng):
    # The messages give the caller's [total, H, D] shapes and [token, head, dim] indices.
    cu = np.array([0, 3, 8], np.int32)
    options = dict(cu_seqlens_q=cu, cu_seqlens_k=cu, max_seqlen_q=5, max_seqlen_k=5)
    q, k = randn(rng, (8, 4, 16)), randn(rng, (8, 2, 16))
    with pytest.raises(pasa.PasaError, match=r"^v: shape \[7, 2, 16\] differs from k's \[8, 2, 16\]"):
        pasa.attention(q, k, k[:7].copy(), **options)
    with pytest.raises(pasa.PasaError, match=r"^k: 3 K/V heads do not divide the 4 query heads"):
        pasa.attention(q, q[:, :3].copy(), q[:, :3].copy(), **options)
    bad = k.copy()
    bad[5, 1, 2] = np.nan
    with pytest.raises(pasa.PasaError, match=r"^k: non-finite value at \[token, head, dim\] = \[5, 1, 2\]"):
        pasa.attention(q, bad, k, **options)
    big = q.copy()
    big[4, 3, 7] = 1e6
    with pytest.raises(pasa.PasaError, match=r"^q: value 1e\+06 at \[token, head, dim\] = \[4, 3, 7\] overflows fp16"):
        pasa.attention(big, k, k, policy="fa16", **options)
    # (a layout was taken and ignored)
    with pytest.raises(pasa.PasaError, match=r"^layout: 'bshd' does not apply to packed inputs"):
        pasa.attention(q, k, k, layout="bshd", **options)


def test_index_arrays_in_either_byte_order(rng):
    q, k = randn(rng, (8, 4, 16)), randn(rng, (8, 2, 16))
    options = dict(max_seqlen_q=5, max_seqlen_k=5)
    native = np.array([0, 3, 8], np.int32)
    swapped = native.astype(">i4" if np.little_endian else "<i4")  # the same values, other byte order
    want = pasa.attention(q, k, k, cu_seqlens_q=native, cu_seqlens_k=native, **options)
    got = pasa.attention(q, k, k, cu_seqlens_q=swapped, cu_seqlens_k=swapped, **options)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("total_q, total_k", [(0, 0), (5, 0), (0, 5)])
def test_empty_varlen_batches_give_empty_outputs(rng, total_q, total_k):
    # No token, or no key, in the whole batch (flash-attn takes these): an output of q's shape, whose
    # rows without keys are O = 0, LSE = -inf.
    cu_q = np.array([0, min(total_q, 2), total_q], np.int32)
    cu_k = np.array([0, min(total_k, 2), total_k], np.int32)
    q, k, v = randn(rng, (total_q, 4, 16)), randn(rng, (total_k, 2, 16)), randn(rng, (total_k, 2, 16))
    out, lse = pasa.attention(q, k, v, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k, max_seqlen_q=3, max_seqlen_k=3,
                              return_lse=True)
    assert out.shape == (total_q, 4, 16) and out.dtype == q.dtype and lse.shape == (4, total_q)
    assert (out == 0).all() and (lse == -np.inf).all()
    given = np.full((total_q, 4, 16), np.nan, np.float32)
    assert pasa.attention(q, k, v, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k, max_seqlen_q=3, max_seqlen_k=3,
                          out=given) is given
    assert (given == 0).all()
    # The shapes must still agree.
    with pytest.raises(pasa.PasaError, match=r"^v: shape \[0, 1, 16\] differs from k's \[0, 2, 16\]"):
        pasa.attention(q, k[:0], v[:0, :1], cu_seqlens_q=cu_q, cu_seqlens_k=np.zeros(3, np.int32),
                       max_seqlen_q=3, max_seqlen_k=0)


def test_bad_kvcache_options_name_their_argument(rng):
    k_cache = randn(rng, (1, 4, 1, 8))
    q = randn(rng, (1, 1, 1, 8))
    with pytest.raises(pasa.PasaError, match="softmax_scale: nan is not finite"):
        pasa.attention_with_kvcache(q, k_cache, k_cache.copy(), cache_seqlens=2, softmax_scale=float("nan"))
    # The C++ API checks the range (which the policy's formats set) as `scale`: named softmax_scale.
    for scale, policy in ((1e6, "pasa"), (1e300, "exact")):
        with pytest.raises(pasa.PasaError, match=r"^softmax_scale: 1e\+(06|300) is outside \[-"):
            pasa.attention_with_kvcache(q, k_cache, k_cache.copy(), cache_seqlens=2, softmax_scale=scale,
                                        policy=policy)
    with pytest.raises(pasa.PasaError, match="max_seqlen_q: .* pass them with cu_seqlens_q"):
        pasa.attention(q, q, q, max_seqlen_q=1, max_seqlen_k=1)


def test_kvcache_and_varlen_messages_name_the_real_fault(rng):
    k_cache = randn(rng, (4, 4, 2, 8))
    table = np.array([[0, 1], [2, 3]], np.int32)
    q = randn(rng, (1, 1, 2, 8))
    with pytest.raises(pasa.PasaError, match=r"^v: 1 new positions \(S_new\), k 2; k and v give the same"):
        pasa.attention_with_kvcache(q, k_cache, k_cache.copy(), randn(rng, (1, 2, 2, 8)), randn(rng, (1, 1, 2, 8)),
                                    cache_seqlens=0, block_table=table[:1])
    with pytest.raises(pasa.PasaError, match=r"^cache_seqlens: a 0-d array, where an array over the sequences"):
        pasa.attention_with_kvcache(randn(rng, (2, 1, 2, 8)), k_cache, k_cache.copy(),
                                    cache_seqlens=np.array(3, np.int32), block_table=table)
    # (which of shape and dtype differs, with both values)
    with pytest.raises(pasa.PasaError, match=r"^v_cache: dtype f16 differs from k_cache's f32"):
        pasa.attention_with_kvcache(q, k_cache, k_cache.astype(np.float16), cache_seqlens=3, block_table=table[:1])
    with pytest.raises(pasa.PasaError, match=r"^v_cache: shape \[5, 2, 4, 8\] \(block, head, slot, dim\) differs "
                                             r"from k_cache's \[4, 2, 4, 8\]"):
        pasa.attention_with_kvcache(q, k_cache, randn(rng, (5, 4, 2, 8)), cache_seqlens=3, block_table=table[:1])
    # (a value's index is labelled before it is given: the C++ view's order is not the arrays')
    poisoned = k_cache.copy()
    poisoned[1, 2, 0, 3] = np.nan
    with pytest.raises(pasa.PasaError, match=r"^k_cache: non-finite value at \[block, head, slot, dim\] = \[1, 0, 2, 3\]"):
        pasa.attention_with_kvcache(q, poisoned, k_cache.copy(), cache_seqlens=8, block_table=table[:1])
    for shape in ((3, 0, 8), (3, 1, 0)):  # (out, which the caller did not pass, was named)
        with pytest.raises(pasa.PasaError, match=r"^q: shape \(3, \d, \d\) has \d heads of head dim \d; a packed"):
            pasa.attention(np.zeros(shape, np.float32), randn(rng, (3, 1, 8)), randn(rng, (3, 1, 8)),
                           cu_seqlens_q=[0, 3], cu_seqlens_k=[0, 3], max_seqlen_q=3, max_seqlen_k=3)


def test_kvcache_checks_cost_what_the_tables_hold_not_the_pool(rng):
    # A read-only cache broadcast over 2^40 blocks (as a cache only read may be): the block-id checks
    # kept an entry per block of the pool, 8 TB here, and ran out of memory.
    block = randn(rng, (1, 4, 1, 8))
    k_cache = np.broadcast_to(block, (2**40, 4, 1, 8))
    table = np.array([[7, 2**31 - 1]], np.int32)
    q = randn(rng, (1, 1, 1, 8))
    o = pasa.attention_with_kvcache(q, k_cache, k_cache, cache_seqlens=6, block_table=table)
    want = pasa.attention_with_kvcache(q, np.repeat(block, 2, axis=0), np.repeat(block, 2, axis=0),
                                       cache_seqlens=6, block_table=np.array([[0, 1]], np.int32))
    np.testing.assert_array_equal(o, want)


def test_an_index_array_whose_copy_does_not_fit_raises_pasa_error(rng, monkeypatch):
    # The int32 copy of a broadcast table of 2^31 columns (32 GiB) raised NumPy's MemoryError; the
    # allocation's failure is simulated here rather than run on the test machine.
    import pasa._serving as serving

    def no_memory(*args, **kwargs):
        raise MemoryError("simulated")

    monkeypatch.setattr(serving.np, "ascontiguousarray", no_memory)
    table = np.broadcast_to(np.zeros((1, 1), np.int32), (4, 2**31 - 1))
    with pytest.raises(pasa.PasaError, match=r"^block_table: its int32 copy \(34359738352 bytes\) does not fit"):
        serving._int32(table, "block_table")


@pytest.mark.parametrize("shape, message", [((2, 0, 4, 8), "sequence size is 0"), ((0, 1, 4, 8), "batch size is 0")])
def test_an_empty_kvcache_query_is_named_q(rng, shape, message):
    # The out allocated for q (stride 0 where a dimension is 0) was reported instead, as if given.
    k_cache = randn(rng, (4, 4, 2, 8))
    table = np.zeros((shape[0], 2), np.int32)
    with pytest.raises(pasa.PasaError, match=rf"^q: {message}"):
        pasa.attention_with_kvcache(np.zeros(shape, np.float32), k_cache, k_cache.copy(),
                                    cache_seqlens=np.zeros(shape[0], np.int32), block_table=table)
    with pytest.raises(pasa.PasaError, match=rf"^q: {message}"):
        pasa.attention(np.zeros(shape, np.float32), k_cache[:shape[0]], k_cache[:shape[0]], layout="bshd")


@pytest.mark.skipif(torch is None, reason="torch is not installed")
def test_torch_cpu_tensors_run_on_the_emulator(rng):
    k_cache, v_cache = randn(rng, (2, 13, 2, 32)), randn(rng, (2, 13, 2, 32))
    q = randn(rng, (2, 3, 4, 32))
    want = pasa.attention_with_kvcache(q, k_cache, v_cache, cache_seqlens=np.array([11, 4], np.int32),
                                       causal=True)
    got = pasa.attention_with_kvcache(*(torch.from_numpy(x) for x in (q, k_cache, v_cache)),
                                      cache_seqlens=torch.tensor([11, 4]), causal=True)  # int64
    assert isinstance(got, torch.Tensor) and got.device.type == "cpu"
    np.testing.assert_array_equal(got.numpy(), want)



@pytest.mark.skipif(torch is None, reason="torch is not installed")
def test_inputs_that_require_grad_raise(rng):
    """These calls write their outputs directly, so a gradient would be silently lost: refused, as
    pasa.attention refuses out= then; under torch.no_grad() they run."""
    x = torch.from_numpy(randn(rng, (8, 4, 16)))
    w = torch.nn.Parameter(torch.eye(16))
    cu = torch.tensor([0, 3, 8], dtype=torch.int32)
    packed = dict(cu_seqlens_q=cu, cu_seqlens_k=cu, max_seqlen_q=5, max_seqlen_k=5)
    with pytest.raises(pasa.PasaError, match=r"^q: requires grad; packed and KV-cache calls record no autograd"):
        pasa.attention(x @ w, x, x, **packed)
    k_cache = torch.from_numpy(randn(rng, (2, 13, 2, 32)))
    q = torch.from_numpy(randn(rng, (2, 3, 4, 32))).requires_grad_()
    with pytest.raises(pasa.PasaError, match=r"^q: requires grad"):
        pasa.attention_with_kvcache(q, k_cache, k_cache.clone(), cache_seqlens=torch.tensor([11, 4]))
    with torch.no_grad():
        o = pasa.attention(x @ w, x, x, **packed)
        want = pasa.attention((x @ w).numpy(), x.numpy(), x.numpy(), cu_seqlens_q=cu.numpy(),
                              cu_seqlens_k=cu.numpy(), max_seqlen_q=5, max_seqlen_k=5)
    np.testing.assert_array_equal(o.numpy(), want)

@pytest.mark.skipif(torch is None, reason="torch is not installed")
def test_written_tensors_count_the_write_for_autograd(rng):
    """The caches an append writes and a given out= are written through DLPack: their version
    counters move as torch's own in-place writes move them, so that a graph which saved their old
    contents refuses its backward instead of using the new ones."""
    w = torch.ones(1, requires_grad=True)
    k_cache, v_cache = torch.zeros(1, 4, 1, 8), torch.zeros(1, 4, 1, 8)
    saved = (k_cache * w).sum()  # saves k_cache for the backward
    with torch.no_grad():
        pasa.attention_with_kvcache(torch.randn(1, 1, 1, 8), k_cache, v_cache, torch.ones(1, 1, 1, 8),
                                    torch.ones(1, 1, 1, 8), cache_seqlens=0)
    assert k_cache[0, 0].eq(1).all()
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        saved.backward()
    x = torch.from_numpy(randn(rng, (8, 4, 16)))
    cu = torch.tensor([0, 3, 8], dtype=torch.int32)
    out = torch.zeros(8, 4, 16)
    before = out._version
    # (the given tensor itself comes back, as from the dense call)
    assert pasa.attention(x, x, x, cu_seqlens_q=cu, cu_seqlens_k=cu, max_seqlen_q=5, max_seqlen_k=5, out=out) is out
    assert out._version > before
    before = k_cache._version  # no append: the caches are only read
    step_out = torch.zeros(1, 1, 1, 8)
    assert pasa.attention_with_kvcache(torch.randn(1, 1, 1, 8), k_cache, v_cache, cache_seqlens=1,
                                       out=step_out) is step_out
    assert k_cache._version == before
    with torch.inference_mode():  # inference tensors keep no counter
        k_cache, v_cache = torch.zeros(1, 4, 1, 8), torch.zeros(1, 4, 1, 8)
        pasa.attention_with_kvcache(torch.randn(1, 1, 1, 8), k_cache, v_cache, torch.ones(1, 1, 1, 8),
                                    torch.ones(1, 1, 1, 8), cache_seqlens=0)


@pytest.mark.skipif(torch is None, reason="torch is not installed")
def test_a_call_that_raises_after_writing_still_counts_the_write(rng, monkeypatch):
    # (Ctrl-C stops the emulator part-way: the append, or some of out's rows, may be in already)
    def writes_then_stops(function, device, arrays, options, captured_workspace):
        arrays[1][0, 0] = 1.0  # the cache's first row
        raise KeyboardInterrupt

    monkeypatch.setattr(pasa._serving, "_launch", writes_then_stops)
    k_cache, v_cache = torch.zeros(1, 4, 1, 8), torch.zeros(1, 4, 1, 8)
    before = k_cache._version
    with pytest.raises(KeyboardInterrupt):
        pasa.attention_with_kvcache(torch.randn(1, 1, 1, 8), k_cache, v_cache, torch.ones(1, 1, 1, 8),
                                    torch.ones(1, 1, 1, 8), cache_seqlens=0)
    assert k_cache._version > before


@pytest.mark.skipif(torch is None, reason="torch is not installed")
def test_inference_tensors_are_written_only_inside_inference_mode(rng):
    """torch refuses in-place writes to an inference tensor outside torch.inference_mode(); pasa's
    writes (an out=, an append into the caches) go past torch's checks, so pasa refuses them itself,
    before anything is written, and takes them inside inference mode."""
    with torch.inference_mode():
        k_cache, v_cache = torch.zeros(1, 4, 1, 8), torch.zeros(1, 4, 1, 8)
        out = torch.full((1, 2, 4, 8), 7.0)
    q, k, v = torch.randn(1, 2, 4, 8), torch.randn(1, 2, 4, 8), torch.randn(1, 2, 4, 8)
    new = torch.ones(1, 1, 1, 8)
    with pytest.raises(pasa.PasaError, match=r"^out: an inference tensor, which may be written in place only "
                                             r"inside torch.inference_mode\(\)"):
        pasa.attention(q, k, v, out=out)
    with pytest.raises(pasa.PasaError, match=r"^k_cache: an inference tensor"):
        pasa.attention_with_kvcache(torch.randn(1, 1, 1, 8), k_cache, v_cache, new, new, cache_seqlens=0)
    x = torch.from_numpy(randn(rng, (4, 2, 8)))
    cu = torch.tensor([0, 4], dtype=torch.int32)
    with pytest.raises(pasa.PasaError, match=r"^out: an inference tensor"):
        pasa.attention(x, x, x, cu_seqlens_q=cu, cu_seqlens_k=cu, max_seqlen_q=4, max_seqlen_k=4,
                       out=out.view(4, 2, 8))
    assert out.eq(7).all() and k_cache.eq(0).all() and v_cache.eq(0).all()
    # (reading an inference tensor is allowed anywhere: no append, only the new out is written)
    pasa.attention_with_kvcache(torch.randn(1, 1, 1, 8), k_cache, v_cache, cache_seqlens=1)
    with torch.inference_mode():
        assert pasa.attention(q, k, v, out=out) is out and not out.eq(7).all()
        pasa.attention_with_kvcache(torch.randn(1, 1, 1, 8), k_cache, v_cache, new, new, cache_seqlens=0)
        assert k_cache[0, 0].eq(1).all()


# --- torch CUDA tensors: the GPU against the CPU emulator on copies of the same inputs ---------------

def host_tensor(rng, shape, dtype):
    """Standard normal values from the project's generator, as a torch CPU tensor of dtype."""
    return torch.from_numpy(randn(rng, shape)).to(dtype)


def assert_close_to_scale(got, want):
    """O within 2e-2 of the CPU result's largest magnitude: fp16/bf16 inputs and fp32 accumulation on
    both, which may still round P for the PV product differently (bf16's unit roundoff is 2^-8)."""
    assert got.shape == want.shape and got.dtype == want.dtype
    got, want = got.cpu().float(), want.float()
    assert torch.isfinite(got).all()
    scale = want.abs().max().item()
    error = (got - want).abs().max().item()
    assert error <= 2e-2 * scale, f"max |GPU - emulator| = {error}, scale {scale}"


def lse_atol(dtype):
    """3u + 1e-3, u the unit roundoff of the inputs' format (the scores and P of exact and fdpp are
    no coarser), as the C++ serving tests allow."""
    return 3 * torch.finfo(dtype).eps / 2 + 1e-3


def shuffled_table(rng, batch, max_blocks, num_blocks):
    """Each sequence its own max_blocks blocks, drawn in random order from [0, num_blocks)."""
    ids = rng.permutation(num_blocks)[:batch * max_blocks]
    return torch.from_numpy(ids.reshape(batch, max_blocks).astype(np.int32))


@gpu
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("policy", ["exact", "fdpp"])
@pytest.mark.parametrize("s_q, causal", [(1, False), (1, True), (7, True)])
@pytest.mark.parametrize("batch", [3, 1])
def test_cuda_paged_cache_with_append_matches_the_emulator(rng, dtype, policy, s_q, causal, batch):
    dtype = getattr(torch, dtype)
    heads_q, heads_kv, d, block, max_blocks = 8, 2, 128, 16, 8
    num_blocks = batch * max_blocks + 5  # some blocks belong to no sequence
    table = shuffled_table(rng, batch, max_blocks, num_blocks)
    # mid-block, empty, several blocks (one sequence: several blocks)
    seqlens = torch.tensor([37, 0, 100] if batch == 3 else [100], dtype=torch.int32)
    k_cache, v_cache = (host_tensor(rng, (num_blocks, block, heads_kv, d), dtype) for _ in range(2))
    q = host_tensor(rng, (batch, s_q, heads_q, d), dtype)
    k_new, v_new = (host_tensor(rng, (batch, s_q, heads_kv, d), dtype) for _ in range(2))
    gq, gk_cache, gv_cache, gk, gv, gtable = (x.cuda() for x in (q, k_cache, v_cache, k_new, v_new, table))
    poison = torch.full_like(gq, float("nan"))
    got, lse = pasa.attention_with_kvcache(gq, gk_cache, gv_cache, gk, gv,
                                           cache_seqlens=seqlens.long().cuda(),  # converted on the GPU
                                           block_table=gtable, causal=causal, policy=policy,
                                           return_softmax_lse=True, out=poison)
    want, want_lse = pasa.attention_with_kvcache(q, k_cache, v_cache, k_new, v_new,
                                                 cache_seqlens=seqlens, block_table=table,
                                                 causal=causal, policy=policy,
                                                 return_softmax_lse=True)
    assert got is poison and lse.device == gq.device and lse.dtype == torch.float32
    assert_close_to_scale(got, want)
    torch.testing.assert_close(lse.cpu(), want_lse, atol=lse_atol(dtype), rtol=0)
    assert torch.equal(gk_cache.cpu(), k_cache) and torch.equal(gv_cache.cpu(), v_cache)


@gpu
def test_cuda_kv_cache_on_a_device_of_99_kib_a_cta():
    """With PASA_CUDA_SMEM_LIMIT at the 99 KiB of sm_86, sm_89 and sm_120 (A10, L4, L40S), head dim 128
    decodes on the compact tile (the paged test above passes in a process under the limit), and head
    dim 256, which no decode tile fits there, is refused naming the shared memory."""
    import os
    import subprocess
    import sys

    env = {**os.environ, "PASA_CUDA_SMEM_LIMIT": "101376"}
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                        f"{__file__}::test_cuda_paged_cache_with_append_matches_the_emulator"],
                       env=env, capture_output=True, text=True, cwd=os.path.dirname(__file__))
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
    script = (
        "import torch, pasa\n"
        "c = torch.zeros(4, 16, 2, 256, dtype=torch.float16, device='cuda')\n"
        "q = torch.zeros(1, 1, 8, 256, dtype=torch.float16, device='cuda')\n"
        "t = torch.arange(4, dtype=torch.int32, device='cuda')[None]\n"
        "try:\n"
        "    pasa.attention_with_kvcache(q, c, c.clone(), cache_seqlens=5, block_table=t)\n"
        "except pasa.PasaError as e:\n"
        "    print(e)\n")
    r = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "split-KV decode kernel" in r.stdout and "bytes of shared memory" in r.stdout, r.stdout
    assert "PASA_CUDA_SMEM_LIMIT" in r.stdout, r.stdout


@gpu
@pytest.mark.parametrize("append", [False, True])
def test_cuda_dense_cache_matches_the_emulator(rng, append):
    dtype, batch, s_max, d = torch.float16, 3, 300, 64
    k_cache, v_cache = (host_tensor(rng, (batch, s_max, 2, d), dtype) for _ in range(2))
    q = host_tensor(rng, (batch, 1, 8, d), dtype)
    new = [host_tensor(rng, (batch, 1, 2, d), dtype) for _ in range(2)] if append else [None, None]
    gpu_new = [None if x is None else x.cuda() for x in new]
    gk_cache, gv_cache = k_cache.cuda(), v_cache.cuda()
    # One int for every sequence; then a full row and an empty one (no key at all without append).
    for lengths in (211, [s_max - 1, 0, 76]):
        host_lengths = lengths if isinstance(lengths, int) else torch.tensor(lengths)
        gpu_lengths = lengths if isinstance(lengths, int) else host_lengths.cuda()
        poison = torch.full(q.shape, float("nan"), dtype=dtype, device="cuda")
        got, lse = pasa.attention_with_kvcache(q.cuda(), gk_cache, gv_cache, *gpu_new,
                                               cache_seqlens=gpu_lengths, return_softmax_lse=True,
                                               out=poison)
        want, want_lse = pasa.attention_with_kvcache(q, k_cache, v_cache, *new,
                                                     cache_seqlens=host_lengths,
                                                     return_softmax_lse=True)
        assert_close_to_scale(got, want)
        torch.testing.assert_close(lse.cpu(), want_lse, atol=lse_atol(dtype), rtol=0)
        assert torch.equal(gk_cache.cpu(), k_cache) and torch.equal(gv_cache.cpu(), v_cache)


@gpu
def test_cuda_graph_replays_with_new_cache_seqlens_and_block_table(rng):
    dtype, batch, heads_q, heads_kv, d, block, max_blocks = torch.bfloat16, 2, 8, 2, 128, 16, 6
    num_blocks = batch * max_blocks
    table = shuffled_table(rng, batch, max_blocks, num_blocks).cuda()
    k_cache, v_cache = (host_tensor(rng, (num_blocks, block, heads_kv, d), dtype).cuda()
                        for _ in range(2))
    lengths = torch.tensor([3, 20], dtype=torch.int32, device="cuda")
    # The graph's inputs: refilled in place before each replay.
    q, k_new, v_new = (host_tensor(rng, (batch, 1, h, d), dtype).cuda()
                       for h in (heads_q, heads_kv, heads_kv))

    def step():
        return pasa.attention_with_kvcache(q, k_cache, v_cache, k_new, v_new, cache_seqlens=lengths,
                                           block_table=table, causal=True)

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm up outside the graph (this appends at 3 and 20)
        step()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = step()
    for new_lengths, new_table in (([4, 21], None), ([17, 60], None),
                                   ([0, max_blocks * block - 1], table.flip(0).flip(1))):
        lengths.copy_(torch.tensor(new_lengths, dtype=torch.int32))
        if new_table is not None:
            table.copy_(new_table)
        for x in (q, k_new, v_new):
            x.copy_(host_tensor(rng, x.shape, dtype))
        k_host, v_host = k_cache.cpu(), v_cache.cpu()  # the cache before this step
        out.fill_(float("nan"))
        graph.replay()
        want = pasa.attention_with_kvcache(q.cpu(), k_host, v_host, k_new.cpu(), v_new.cpu(),
                                           cache_seqlens=torch.tensor(new_lengths),
                                           block_table=table.cpu(), causal=True)
        assert_close_to_scale(out, want)
        assert torch.equal(k_cache.cpu(), k_host) and torch.equal(v_cache.cpu(), v_host)


@gpu
def test_captured_kvcache_call_takes_its_workspace_from_torch(rng, monkeypatch):
    """Inside capture the decode's workspace comes from torch's allocator (the graph's pool): a
    stream allocation would put allocation nodes into the graph, which every replay runs."""
    from pasa import _torch

    dtype, batch, heads_q, heads_kv, d, length = torch.float16, 1, 8, 2, 64, 4096  # split: a workspace
    q = host_tensor(rng, (batch, 1, heads_q, d), dtype).cuda()
    k_cache, v_cache = (host_tensor(rng, (batch, length, heads_kv, d), dtype).cuda() for _ in range(2))
    lengths = torch.full((batch,), length, dtype=torch.int32, device="cuda")
    sizes = []
    real_workspace = _torch._workspace

    def counting_workspace(device, stream, size):
        sizes.append(size)
        return real_workspace(device, stream, size)

    monkeypatch.setattr(_torch, "_workspace", counting_workspace)
    eager = pasa.attention_with_kvcache(q, k_cache, v_cache, cache_seqlens=lengths)
    assert sizes == []  # eager calls check the lengths on the host and keep their own allocation
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = pasa.attention_with_kvcache(q, k_cache, v_cache, cache_seqlens=lengths)
    assert len(sizes) == 1 and sizes[0] > 0
    out.fill_(float("nan"))
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(out, eager)


@gpu
def test_cuda_varlen_matches_the_emulator(rng):
    lengths = [(5, 9), (0, 3), (17, 17), (3, 0), (1, 70), (9, 4)]  # empty, no key, S_q > S_kv
    cu_q = torch.tensor(np.cumsum([0] + [n for n, _ in lengths]), dtype=torch.int32)
    cu_k = torch.tensor(np.cumsum([0] + [n for _, n in lengths]), dtype=torch.int32)
    q = host_tensor(rng, (int(cu_q[-1]), 4, 64), torch.float16)
    k, v = (host_tensor(rng, (int(cu_k[-1]), 2, 64), torch.float16) for _ in range(2))
    options = dict(max_seqlen_q=17, max_seqlen_k=70, causal=True, policy="exact", return_lse=True)
    want, want_lse = pasa.attention(q, k, v, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k, **options)
    poison = torch.full(q.shape, float("nan"), dtype=q.dtype, device="cuda")
    got, lse = pasa.attention(q.cuda(), k.cuda(), v.cuda(), cu_seqlens_q=cu_q.long().cuda(),
                              cu_seqlens_k=cu_k.cuda(), out=poison, **options)
    assert got.device == lse.device == torch.device("cuda", torch.cuda.current_device())
    assert lse.shape == (4, q.shape[0]) and lse.dtype == torch.float32
    assert_close_to_scale(got, want)
    torch.testing.assert_close(lse.cpu(), want_lse, atol=lse_atol(q.dtype), rtol=0)


@gpu
@pytest.mark.parametrize("total_q, total_k", [(0, 0), (5, 0), (0, 5)])
def test_cuda_empty_varlen_batches_give_empty_outputs(rng, total_q, total_k):
    cu_q = torch.tensor([0, min(total_q, 2), total_q], dtype=torch.int32, device="cuda")
    cu_k = torch.tensor([0, min(total_k, 2), total_k], dtype=torch.int32, device="cuda")
    q = host_tensor(rng, (total_q, 4, 64), torch.float16).cuda()
    k, v = (host_tensor(rng, (total_k, 2, 64), torch.float16).cuda() for _ in range(2))
    out, lse = pasa.attention(q, k, v, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k, max_seqlen_q=3, max_seqlen_k=3,
                              return_lse=True)
    assert out.shape == (total_q, 4, 64) and lse.shape == (4, total_q)
    assert (out == 0).all() and (lse == -float("inf")).all()


@gpu
def test_cuda_varlen_is_refused_inside_graph_capture(rng):
    q = host_tensor(rng, (8, 4, 64), torch.float16).cuda()
    cu = torch.tensor([0, 3, 8], dtype=torch.int32, device="cuda")
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):  # reading the offsets on the host would wait inside the capture
        with pytest.raises(pasa.PasaError, match="(?i)captur"):
            pasa.attention(q, q, q, cu_seqlens_q=cu, cu_seqlens_k=cu, max_seqlen_q=5, max_seqlen_k=5)


@gpu
def test_cuda_bad_input_raises_before_writing(rng):
    dtype, d = torch.float16, 64
    k_cache, v_cache = (host_tensor(rng, (4, 16, 2, d), dtype).cuda() for _ in range(2))
    k_before, v_before = k_cache.clone(), v_cache.clone()
    q = host_tensor(rng, (2, 1, 4, d), dtype).cuda()
    new = host_tensor(rng, (2, 1, 2, d), dtype).cuda()
    lengths = torch.tensor([2, 20], dtype=torch.int32, device="cuda")
    out = torch.full_like(q, float("nan"))
    bad_table = torch.tensor([[0, 1], [2, 4]], dtype=torch.int32, device="cuda")  # 4: no such block
    with pytest.raises(pasa.PasaError, match=r"block_table: \[1, 1\] = 4 is outside \[0, 4\)"):
        pasa.attention_with_kvcache(q, k_cache, v_cache, new, new, cache_seqlens=lengths,
                                    block_table=bad_table, out=out)
    torch.cuda.synchronize()
    assert torch.isnan(out).all()
    assert torch.equal(k_cache, k_before) and torch.equal(v_cache, v_before)
    table = torch.tensor([[0, 1], [2, 3]], dtype=torch.int32, device="cuda")
    long_q = host_tensor(rng, (2, 17, 4, d), dtype).cuda()  # S_q 17: past the decode kernel's 16
    refused = r"^attention_with_kvcache on the GPU runs the split-KV decode kernel, which does not run this call"
    # what the decode kernel does not run, and why
    for query, policy, why in ((long_q, "exact", r"takes S_q <= 16 \(q has S_q = 17\)"),
                               (q, "pasa", "runs the exact and fdpp policies")):
        with pytest.raises(pasa.PasaError, match=rf"{refused} .*: it {why}"):
            pasa.attention_with_kvcache(query, k_cache, v_cache, cache_seqlens=lengths,
                                        block_table=table, policy=policy)


@gpu
def test_cuda_arrays_on_another_device_are_named(rng):
    k_cache = host_tensor(rng, (4, 16, 2, 64), torch.float16)
    q = host_tensor(rng, (2, 1, 4, 64), torch.float16)
    table = torch.tensor([[0, 1], [2, 3]], dtype=torch.int32)
    gq, gk_cache, gtable = q.cuda(), k_cache.cuda(), table.cuda()
    lengths = torch.tensor([2, 20], dtype=torch.int32, device="cuda")
    cases = [  # (q, k_cache, block_table, cache_seqlens), the message
        ((gq, k_cache, gtable, lengths), r"k_cache: on cpu but q is on cuda"),
        ((gq, gk_cache, table, lengths), r"block_table: on cpu but q is on cuda"),
        ((gq, gk_cache, gtable, np.array([2, 20], np.int32)), r"cache_seqlens: on cpu but q is on cuda"),
        ((gq, gk_cache, gtable, lengths.float()), r"cache_seqlens: expected integers"),
        ((q, gk_cache, table, lengths.cpu()), r"k_cache: on cuda:\d+ but q is on cpu"),
        ((q, k_cache, gtable, lengths.cpu()), r"block_table: on cuda:\d+ but q is on cpu"),
    ]
    for (query, cache, block_table, cache_seqlens), message in cases:
        with pytest.raises(pasa.PasaError, match=message):
            pasa.attention_with_kvcache(query, cache, cache, cache_seqlens=cache_seqlens,
                                        block_table=block_table)


def test_outputs_overlapping_what_the_call_reads_raise_before_writing(rng):
    # Packed: an output over k.
    cu = np.array([0, 3, 8], np.int32)
    q, kv = randn(rng, (8, 4, 16)), randn(rng, (8, 4, 16))
    before = kv.copy()
    with pytest.raises(pasa.PasaError, match="^out: its memory overlaps k's"):
        pasa.attention(q, kv, kv.copy(), cu_seqlens_q=cu, cu_seqlens_k=cu, max_seqlen_q=5, max_seqlen_k=5, out=kv)
    np.testing.assert_array_equal(kv, before)
    # Packed: the offsets inside the output (read while it is written).
    memory = np.zeros(8 * 4 * 16, np.float32)
    offsets = memory[:3].view(np.int32)
    offsets[:] = cu
    with pytest.raises(pasa.PasaError, match="^out: its memory overlaps cu_seqlens_q's"):
        pasa.attention(q, kv, kv.copy(), cu_seqlens_q=offsets, cu_seqlens_k=cu, max_seqlen_q=5, max_seqlen_k=5,
                       out=memory.reshape(8, 4, 16))
    np.testing.assert_array_equal(offsets, cu)
    # KV cache: an output over q, over the new keys, or with heads sharing rows; neither the output nor
    # the cache (the append comes first) is written.
    k_cache, v_cache = randn(rng, (1, 6, 1, 8)), randn(rng, (1, 6, 1, 8))
    cache_before = k_cache.copy()
    step_q, new_k, new_v = randn(rng, (1, 1, 2, 8)), randn(rng, (1, 1, 1, 8)), randn(rng, (1, 1, 1, 8))
    q_before = step_q.copy()
    with pytest.raises(pasa.PasaError, match="^out: its memory overlaps q's"):
        pasa.attention_with_kvcache(step_q, k_cache, v_cache, new_k, new_v, cache_seqlens=2, out=step_q)
    np.testing.assert_array_equal(step_q, q_before)
    keys = randn(rng, (1, 1, 2, 8))
    with pytest.raises(pasa.PasaError, match="^out: its memory overlaps k's"):
        pasa.attention_with_kvcache(step_q, k_cache, v_cache, keys[:, :, :1], new_v, cache_seqlens=2, out=keys)
    memory = np.zeros(16, np.float32)  # the cache lengths inside the output
    lengths = memory[:1].view(np.int32)
    lengths[:] = 2
    with pytest.raises(pasa.PasaError, match="^out: its memory overlaps cache_seqlens's"):
        pasa.attention_with_kvcache(step_q, k_cache, v_cache, new_k, new_v, cache_seqlens=lengths,
                                    out=memory.reshape(1, 1, 2, 8))
    assert lengths[0] == 2
    memory = np.zeros(8, np.float32)
    shared = np.lib.stride_tricks.as_strided(memory, (1, 1, 2, 8), (64, 64, 4, 4))  # both heads, one row
    with pytest.raises(pasa.PasaError, match=r"^out: sizes \[1, 1, 2, 8\] with strides \[16, 16, 1, 1\]"):
        pasa.attention_with_kvcache(step_q, k_cache, v_cache, new_k, new_v, cache_seqlens=2, out=shared)
    np.testing.assert_array_equal(k_cache, cache_before)


def test_index_arrays_copied_to_int32_are_still_kept_apart_from_what_the_call_writes(rng):
    # An index array of another dtype, or a block table cut to the columns read, reaches the C++ call
    # as an int32 copy; the caller's own array must still be refused where the call writes over it.
    cu = np.array([0, 3, 8], np.int64)
    q, kv = randn(rng, (8, 4, 16)), randn(rng, (8, 4, 16))
    memory = np.zeros(8 * 4 * 16, np.float32)
    offsets = memory[:6].view(np.int64)
    offsets[:] = cu
    with pytest.raises(pasa.PasaError, match="^out: its memory overlaps cu_seqlens_q's"):
        pasa.attention(q, kv, kv, cu_seqlens_q=offsets, cu_seqlens_k=cu, max_seqlen_q=5, max_seqlen_k=5,
                       out=memory.reshape(8, 4, 16))
    np.testing.assert_array_equal(offsets, cu)
    # A paged cache whose (int64) block table lies in k_cache's memory: an append would write over it.
    k_cache, v_cache = randn(rng, (6, 4, 2, 8)), randn(rng, (6, 4, 2, 8))
    table = k_cache.reshape(-1)[:12].view(np.int64).reshape(2, 3)
    table[:] = [[1, 2, 3], [4, 5, 0]]
    cache_before = k_cache.copy()
    step_q, new = randn(rng, (2, 1, 4, 8)), randn(rng, (2, 1, 2, 8))
    with pytest.raises(pasa.PasaError, match="^k_cache: its memory overlaps block_table's"):
        pasa.attention_with_kvcache(step_q, k_cache, v_cache, new, new.copy(), cache_seqlens=[3, 9], block_table=table)
    np.testing.assert_array_equal(k_cache, cache_before)
    # (only read, the table may lie there; and an int32 table inside out=, cut to the columns read)
    pasa.attention_with_kvcache(step_q, k_cache, v_cache, cache_seqlens=[3, 9], block_table=table)
    out = np.zeros((2, 1, 4, 8), np.float32)
    inside = out.reshape(-1)[:6].view(np.int32).reshape(2, 3)
    inside[:] = [[0, 1, 2], [3, 4, 5]]
    with pytest.raises(pasa.PasaError, match="^out: its memory overlaps block_table's"):
        pasa.attention_with_kvcache(step_q, k_cache, v_cache, cache_seqlens=[1, 2], block_table=inside, out=out)
    np.testing.assert_array_equal(inside, [[0, 1, 2], [3, 4, 5]])


@pytest.mark.skipif(torch is None, reason="torch is not installed")
def test_serving_calls_take_a_torch_out_only_beside_torch_q(rng):
    q = randn(rng, (4, 2, 8))
    with pytest.raises(pasa.PasaError, match=r"^out: a torch.Tensor, but q is a numpy.ndarray"):
        pasa.attention(q, q, q, cu_seqlens_q=[0, 4], cu_seqlens_k=[0, 4], max_seqlen_q=4, max_seqlen_k=4,
                       out=torch.zeros(4, 2, 8))
    step_q, cache = randn(rng, (1, 1, 2, 8)), randn(rng, (1, 4, 2, 8))
    with pytest.raises(pasa.PasaError, match=r"^out: a torch.Tensor, but q is a numpy.ndarray"):
        pasa.attention_with_kvcache(step_q, cache, cache.copy(), cache_seqlens=2, out=torch.zeros(1, 1, 2, 8))


def test_a_paged_append_of_the_wrong_rank_is_named(rng):
    cache, table = randn(rng, (2, 4, 1, 8)), np.array([[0], [1]], np.int32)
    with pytest.raises(pasa.PasaError, match=r"^k: expected a 4-D array"):
        pasa.attention_with_kvcache(randn(rng, (2, 1, 1, 8)), cache, cache.copy(), np.zeros(5, np.float32),
                                    np.zeros(5, np.float32), cache_seqlens=1, block_table=table)


def test_kvcache_output_of_another_shape_is_named_out(rng):
    # The C++ API calls it o; the Python argument is out, and the error says so.
    step_q = randn(rng, (1, 1, 2, 16))
    cache = randn(rng, (1, 8, 2, 16))
    with pytest.raises(pasa.PasaError, match=r"^out: shape \(1, 1, 2, 8\) differs from q's \(1, 1, 2, 16\)"):
        pasa.attention_with_kvcache(step_q, cache, cache.copy(), cache_seqlens=4,
                                    out=np.zeros((1, 1, 2, 8), np.float32))


def test_output_strides_are_named_out_as_the_dense_path_names_them(rng):
    # The C++ API checks its output o; the packed and KV-cache paths name the Python argument, out.
    q = randn(rng, (4, 2, 8))
    with pytest.raises(pasa.PasaError, match=r"^out: stride of the heads dimension is -8 \(must be positive\)"):
        pasa.attention(q, q, q, cu_seqlens_q=[0, 4], cu_seqlens_k=[0, 4], max_seqlen_q=4, max_seqlen_k=4,
                       out=np.zeros((4, 2, 8), np.float32)[:, ::-1])
    step_q, cache = randn(rng, (1, 1, 2, 8)), randn(rng, (1, 4, 2, 8))
    with pytest.raises(pasa.PasaError, match=r"^out: stride of the heads dimension is -8"):
        pasa.attention_with_kvcache(step_q, cache, cache.copy(), cache_seqlens=2,
                                    out=np.zeros((1, 1, 2, 8), np.float32)[:, :, ::-1])


@pytest.mark.parametrize("cu_seqlens_q, message", [
    # (NumPy before 1.24 makes a ragged list an object array, with a warning, instead of refusing it)
    ([0, [4]], r"^cu_seqlens_q: (expected an array of integers, got a list that NumPy cannot make one array of"
               r"|expected integers, got dtype object)"),
    ([], r"^cu_seqlens_q: 0 integers, but it needs B \+ 1 >= 2"),
    ([4], r"^cu_seqlens_q: 1 integers, but it needs B \+ 1 >= 2"),
    ([0, 2**70], r"^cu_seqlens_q: values do not fit in int32"),
    ([-2**70, 4], r"^cu_seqlens_q: values do not fit in int32"),
    ([0, 2**31], r"^cu_seqlens_q: values do not fit in int32"),
])
def test_bad_cu_seqlens_are_named(rng, cu_seqlens_q, message):
    q = randn(rng, (4, 2, 8))
    with pytest.raises(pasa.PasaError, match=message):
        pasa.attention(q, q, q, cu_seqlens_q=cu_seqlens_q, cu_seqlens_k=[0, 4], max_seqlen_q=4, max_seqlen_k=4)


def test_cu_seqlens_of_python_ints_in_an_object_array_are_taken(rng):
    q = randn(rng, (4, 2, 8))
    want = pasa.attention(q, q, q, cu_seqlens_q=[0, 4], cu_seqlens_k=[0, 4], max_seqlen_q=4, max_seqlen_k=4)
    got = pasa.attention(q, q, q, cu_seqlens_q=np.array([0, 4], dtype=object), cu_seqlens_k=[0, 4],
                         max_seqlen_q=4, max_seqlen_k=4)
    np.testing.assert_array_equal(got, want)


def test_read_only_arrays_the_call_would_write_raise_pasa_errors(rng):
    # (nanobind refused them with a TypeError listing its signatures)
    cu = np.array([0, 3, 8], np.int32)
    q, kv = randn(rng, (8, 4, 16)), randn(rng, (8, 4, 16))
    out = np.zeros_like(q)
    out.setflags(write=False)
    with pytest.raises(pasa.PasaError, match="^out: array is read-only"):
        pasa.attention(q, kv, kv, cu_seqlens_q=cu, cu_seqlens_k=cu, max_seqlen_q=5, max_seqlen_k=5, out=out)
    step_q, cache = randn(rng, (1, 1, 2, 16)), randn(rng, (1, 8, 2, 16))
    out = np.zeros_like(step_q)
    out.setflags(write=False)
    with pytest.raises(pasa.PasaError, match="^out: array is read-only"):
        pasa.attention_with_kvcache(step_q, cache, cache.copy(), cache_seqlens=4, out=out)
