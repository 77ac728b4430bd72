# SPDX-License-Identifier: Apache-2.0
"""pasa.attention and pasa.reference on NumPy arrays (CPU backends) against a NumPy float64
attention written in the test."""

from __future__ import annotations

import numpy as np
import pytest

import pasa

from conftest import np_attention, qkv

# The exact policy computes in fp32: its error against fp64 is a few fp32 ulps of the output.
F32_ATOL = 2e-5


@pytest.mark.parametrize("b,h_q,h_kv,s_q,s_kv,d", [
    (1, 1, 1, 1, 1, 64),       # S = 1
    (2, 4, 4, 17, 17, 64),     # a sequence not a multiple of any tile
    (1, 2, 2, 130, 70, 128),   # S_q != S_kv, hdim 128
    (2, 8, 1, 33, 65, 64),     # MQA: one KV head
    (1, 6, 2, 40, 40, 17),     # GQA, odd head dim
])
def test_exact_matches_numpy_reference(rng, b, h_q, h_kv, s_q, s_kv, d):
    q, k, v = qkv(rng, b, h_q, h_kv, s_q, s_kv, d)
    out, lse = pasa.attention(q, k, v, return_lse=True)
    want, want_lse = np_attention(q, k, v)
    assert out.dtype == np.float32 and out.shape == q.shape
    assert lse.dtype == np.float32 and lse.shape == (b, h_q, s_q)
    np.testing.assert_allclose(out, want, atol=F32_ATOL, rtol=0)
    np.testing.assert_allclose(lse, want_lse, atol=F32_ATOL, rtol=1e-6)


@pytest.mark.parametrize("alignment", ["bottom_right", "top_left"])
@pytest.mark.parametrize("s_q,s_kv", [(17, 17), (9, 30), (30, 9)])
def test_causal_alignments(rng, alignment, s_q, s_kv):
    q, k, v = qkv(rng, 2, 4, 2, s_q, s_kv, 64)
    out, lse = pasa.attention(q, k, v, causal=True, causal_alignment=alignment, return_lse=True)
    want, want_lse = np_attention(q, k, v, causal=True, alignment=alignment)
    np.testing.assert_allclose(out, want, atol=F32_ATOL, rtol=0)
    np.testing.assert_allclose(lse, want_lse, atol=F32_ATOL, rtol=1e-6)
    if alignment == "bottom_right" and s_q > s_kv:
        # The first s_q - s_kv query rows see no key: O = 0 and LSE = -inf.
        masked = s_q - s_kv
        assert np.all(out[:, :, :masked] == 0)
        assert np.all(np.isneginf(lse[:, :, :masked]))
        assert np.all(np.isfinite(lse[:, :, masked:]))


def test_causal_alignments_differ_when_shapes_differ(rng):
    q, k, v = qkv(rng, 1, 2, 2, 8, 20, 64)
    a = pasa.attention(q, k, v, causal=True, causal_alignment="bottom_right")
    b = pasa.attention(q, k, v, causal=True, causal_alignment="top_left")
    assert np.abs(a - b).max() > 1e-3


@pytest.mark.parametrize("layout", ["bhsd", "bshd"])
def test_layouts(rng, layout):
    q, k, v = qkv(rng, 2, 4, 2, 21, 34, 64, layout=layout)
    out, lse = pasa.attention(q, k, v, layout=layout, causal=True, return_lse=True)
    want, want_lse = np_attention(q, k, v, layout=layout, causal=True)
    assert out.shape == q.shape
    assert lse.shape == (2, 4, 21)  # always [B, H, S_q]
    np.testing.assert_allclose(out, want, atol=F32_ATOL, rtol=0)
    np.testing.assert_allclose(lse, want_lse, atol=F32_ATOL, rtol=1e-6)


def test_bshd_equals_transposed_bhsd(rng):
    q, k, v = qkv(rng, 2, 4, 4, 19, 19, 64, layout="bshd")
    a = pasa.attention(q, k, v, layout="bshd")
    t = [np.ascontiguousarray(x.transpose(0, 2, 1, 3)) for x in (q, k, v)]
    b = pasa.attention(*t)
    np.testing.assert_array_equal(a, b.transpose(0, 2, 1, 3))


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_dtypes(rng, dtype):
    q, k, v = qkv(rng, 1, 4, 4, 50, 50, 64, dtype=dtype)
    out = pasa.attention(q, k, v)
    assert out.dtype == dtype
    want, _ = np_attention(q, k, v)
    # The output is rounded to its own dtype: half an ulp, 2^-11 |o| in float16 (|o| passes 1 on some
    # draws), beside float32's own error.
    rtol = 0 if dtype == np.float32 else 2.0 ** -11
    np.testing.assert_allclose(out.astype(np.float64), want, atol=F32_ATOL, rtol=rtol)


def test_out_dtype_may_differ_and_out_is_fully_written(rng):
    q, k, v = qkv(rng, 2, 2, 2, 17, 17, 64, dtype=np.float16)
    out = np.full(q.shape, np.nan, dtype=np.float32)  # poisoned
    result = pasa.attention(q, k, v, out=out)
    assert result is out
    assert np.all(np.isfinite(out))
    want, _ = np_attention(q, k, v)
    np.testing.assert_allclose(out, want, atol=F32_ATOL, rtol=0)


def test_scale(rng):
    q, k, v = qkv(rng, 1, 2, 2, 17, 23, 64)
    out = pasa.attention(q, k, v, scale=0.3)
    want, _ = np_attention(q, k, v, scale=0.3)
    np.testing.assert_allclose(out, want, atol=F32_ATOL, rtol=0)


def test_read_only_and_broadcast_inputs(rng):
    q, k, v = qkv(rng, 2, 4, 1, 17, 17, 64)
    for x in (q, k, v):
        x.flags.writeable = False
    k4 = np.broadcast_to(k, (2, 4, 17, 64))  # stride 0 over heads, read-only
    v4 = np.broadcast_to(v, (2, 4, 17, 64))
    out = pasa.attention(q, k4, v4)
    want, _ = np_attention(q, k, v)
    np.testing.assert_allclose(out, want, atol=F32_ATOL, rtol=0)


def test_strided_views(rng):
    big = rng.standard_normal((2, 6, 40, 64)).astype(np.float32)
    q = big[:, ::2, 3:20]  # strided heads and an offset in S, head dim contiguous
    k = big[:, 1::2, 5:30]
    v = big[:, 1::2, 10:35]
    out = pasa.attention(q, k, v)
    want, _ = np_attention(q, k, v)
    np.testing.assert_allclose(out, want, atol=F32_ATOL, rtol=0)


def low_precision_error(rng, policy, causal=False):
    q, k, v = qkv(rng, 1, 4, 4, 200, 200, 64, dtype=np.float16)
    out = pasa.attention(q, k, v, policy=policy, causal=causal)
    want, _ = np_attention(q, k, v, causal=causal)
    assert out.dtype == np.float16 and np.all(np.isfinite(out))
    return np.abs(out.astype(np.float64) - want).max()


# Max error bounds in units of 2^-11 (half an fp16 ulp at 1), about 4x what these inputs show:
# fp16 S and P cost a few ulps; fp16 softmax arithmetic more; PASA's shifted scores in fp16 more
# still (algorithms.md section 3: its benefit is range, not precision, on well-scaled inputs like these).
@pytest.mark.parametrize("policy,ulps", [("fa16_fp32", 16), ("fa16", 24), ("pasa", 64)])
@pytest.mark.parametrize("causal", [False, True])
def test_low_precision_policies(rng, policy, ulps, causal):
    err = low_precision_error(rng, policy, causal)
    assert err < ulps * 2.0 ** -11, f"{policy}: max error {err}"


def test_low_precision_policies_are_not_exact(rng):
    q, k, v = qkv(rng, 1, 4, 4, 200, 200, 64, dtype=np.float16)
    exact = pasa.attention(q, k, v, policy="exact", out=np.empty(q.shape, np.float32))
    fa16 = pasa.attention(q, k, v, policy="fa16", out=np.empty(q.shape, np.float32))
    assert np.abs(exact - fa16).max() > 0


def test_policy_object_and_text_agree(rng):
    q, k, v = qkv(rng, 1, 2, 2, 40, 40, 64, dtype=np.float16)
    a = pasa.attention(q, k, v, policy="pasa,s2=64")
    b = pasa.attention(q, k, v, policy=pasa.Policy("pasa").replace(s2=64))
    np.testing.assert_array_equal(a, b)


def test_deterministic(rng):
    q, k, v = qkv(rng, 2, 4, 2, 70, 70, 64)
    np.testing.assert_array_equal(pasa.attention(q, k, v, policy="pasa"),
                                  pasa.attention(q, k, v, policy="pasa"))


def test_reference(rng):
    q, k, v = qkv(rng, 2, 4, 2, 17, 30, 64)
    o, lse = pasa.reference(q, k, v, causal=True, return_lse=True)
    want, want_lse = np_attention(q, k, v, causal=True)
    assert o.dtype == np.float64 and lse.dtype == np.float64
    np.testing.assert_allclose(o, want, atol=1e-12, rtol=0)
    np.testing.assert_allclose(lse, want_lse, atol=1e-12, rtol=0)


def test_reference_layout_and_input_rounding(rng):
    q, k, v = qkv(rng, 1, 3, 3, 10, 12, 64, layout="bshd")
    o = pasa.reference(q, k, v, layout="bshd")
    assert o.shape == q.shape
    np.testing.assert_allclose(o, np_attention(q, k, v, layout="bshd")[0], atol=1e-12, rtol=0)
    # The pasa policy's input format is fp16: the reference rounds q, k, v to it first.
    o16 = pasa.reference(q, k, v, layout="bshd", policy="pasa")
    want16, _ = np_attention(*(x.astype(np.float16) for x in (q, k, v)), layout="bshd")
    np.testing.assert_allclose(o16, want16, atol=1e-12, rtol=0)


def test_planned_attention_runs_on_new_pointers(rng):
    # The plan behind pasa.attention's eager torch path: made once from arrays (every check), then
    # run on the data pointers of other arrays of the same problem.
    from pasa import _core
    from pasa._policy import core_policy

    q, k, v = qkv(rng, 2, 4, 2, 5, 7, 16)
    o, lse = np.empty_like(q), np.empty((2, 4, 5), np.float32)
    plan = _core.PlannedAttention(q, k, v, o, lse, core_policy("pasa"), True, "bottom_right", None,
                                  "bhsd")
    assert plan.workspace_bytes == 0  # (the CPU emulator needs none)
    q2, k2, v2 = qkv(rng, 2, 4, 2, 5, 7, 16)
    o2, lse2 = np.empty_like(q), np.empty((2, 4, 5), np.float32)
    plan.run(q2.ctypes.data, k2.ctypes.data, v2.ctypes.data, o2.ctypes.data, lse2.ctypes.data, 0, 0)
    want, want_lse = pasa.attention(q2, k2, v2, policy="pasa", causal=True, return_lse=True)
    np.testing.assert_array_equal(o2, want)
    np.testing.assert_array_equal(lse2, want_lse)
    with pytest.raises(pasa.PasaError, match="lse: the plan writes an LSE"):
        plan.run(q2.ctypes.data, k2.ctypes.data, v2.ctypes.data, o2.ctypes.data, 0, 0, 0)
    with pytest.raises(pasa.PasaError, match="out: its memory overlaps q"):
        _core.PlannedAttention(q, k, v, q, lse, core_policy("pasa"), True, "bottom_right", None,
                               "bhsd")
