# SPDX-License-Identifier: Apache-2.0
"""window_size, softcap and attn_mask through pasa.attention, pasa.reference and pasa.sdpa on the
CPU, against NumPy attention written from the definitions (flash-attn's window_size and softcap,
torch SDPA's attn_mask)."""

from __future__ import annotations

import numpy as np
import pytest

import pasa
from conftest import qkv

U32 = 2.0**-24  # float32 unit roundoff


def np_attention(q, k, v, *, causal=False, alignment="bottom_right", window=(-1, -1), softcap=0.0,
                 mask=None):
    """float64 attention: scores, softcap, + mask (bool: False hides), window and causal limits."""
    q, k, v = (np.asarray(x, dtype=np.float64) for x in (q, k, v))
    s_q, s_kv, d = q.shape[2], k.shape[2], q.shape[3]
    k = np.repeat(k, q.shape[1] // k.shape[1], axis=1)
    v = np.repeat(v, q.shape[1] // v.shape[1], axis=1)
    s = np.einsum("bhqd,bhkd->bhqk", q, k) / np.sqrt(d)
    if softcap:
        s = softcap * np.tanh(s / softcap)
    if mask is not None:
        s = np.where(mask, s, -np.inf) if mask.dtype == bool else s + mask.astype(np.float64)
    rows = np.arange(s_q)[:, None] + (s_kv - s_q if alignment == "bottom_right" else 0)
    cols = np.arange(s_kv)[None, :]
    keep = np.ones((s_q, s_kv), bool)
    if causal:
        keep &= cols <= rows
    if window[0] >= 0:
        keep &= cols >= rows - window[0]
    if window[1] >= 0:
        keep &= cols <= rows + window[1]
    s = np.where(keep, s, -np.inf)
    m = s.max(-1, keepdims=True)
    empty = np.isneginf(m)
    p = np.exp(s - np.where(empty, 0, m))
    total = p.sum(-1, keepdims=True)
    return np.where(empty, 0.0, np.einsum("bhqk,bhkd->bhqd", p, v) / np.where(empty, 1, total))


CASES = [
    dict(window=(5, 3)),
    dict(causal=True, window=(8, -1), s_q=17, s_kv=70),
    dict(causal=True, alignment="top_left", window=(4, 0), s_q=40, s_kv=17),
    dict(softcap=1.5, causal=True),
    dict(mask="float", mask_shape=(1, 4, 33, 33)),
    dict(mask="bool", mask_shape=(2, 1, 1, 33)),   # a padding mask
    dict(mask="bool", mask_shape=(33, 33), softcap=2.0, window=(6, -1), causal=True),
]


@pytest.mark.parametrize("case", CASES, ids=[str(i) for i in range(len(CASES))])
def test_attention_and_reference_follow_the_definitions(rng, case):
    case = dict(case)
    s_q, s_kv = case.pop("s_q", 33), case.pop("s_kv", 33)
    q, k, v = qkv(rng, b=2, h_q=4, h_kv=2, s_q=s_q, s_kv=s_kv, d=32)
    kind, shape = case.pop("mask", None), case.pop("mask_shape", None)
    mask = None
    if kind == "float":
        mask = rng.uniform(-3, 3, shape).astype(np.float32)
        mask[rng.random(shape) < 0.2] = -np.inf
    elif kind == "bool":
        mask = rng.random(shape) > 0.2
    options = dict(causal=case.get("causal", False),
                   causal_alignment=case.get("alignment", "bottom_right"),
                   window_size=case.get("window"), softcap=case.get("softcap"), attn_mask=mask)
    want = np_attention(q, k, v, mask=mask, **case)
    ref = pasa.reference(q, k, v, **options)
    np.testing.assert_allclose(ref, want, rtol=0, atol=1e-12)
    got = pasa.attention(q, k, v, **options)
    # exact: float32 throughout; a few float32 roundings per term of the D- and S_kv-long sums.
    np.testing.assert_allclose(got, want, rtol=0, atol=64 * U32 * np.sqrt(32 + s_kv))
    plain = np_attention(q, k, v, causal=options["causal"], alignment=options["causal_alignment"])
    assert np.abs(plain - want).max() > 1e-2  # the mechanism changes this input's result


def test_sdpa_takes_masks_and_windows(rng):
    q, k, v = qkv(rng, b=1, h_q=2, h_kv=1, s_q=20, s_kv=20, d=16)
    mask = rng.random((1, 1, 20, 20)) > 0.3
    got = pasa.sdpa(q, k, v, attn_mask=mask, enable_gqa=True)
    np.testing.assert_allclose(got, np_attention(q, k, v, mask=mask), atol=1e-5)
    got = pasa.sdpa(q, k, v, is_causal=True, enable_gqa=True, window_size=(3, 0), softcap=5.0)
    want = np_attention(q, k, v, causal=True, alignment="top_left", window=(3, 0), softcap=5.0)
    np.testing.assert_allclose(got, want, atol=1e-5)


def test_sdpa_3d_masks_are_per_batch(rng):
    q, k, v = (x[:, 0] for x in qkv(rng, b=3, h_q=1, s_q=10, d=16))
    mask = rng.random((3, 10, 10)) > 0.3
    mask[..., 0] = True
    got = pasa.sdpa(q, k, v, attn_mask=mask)
    want = np_attention(q[:, None], k[:, None], v[:, None], mask=mask[:, None])[:, 0]
    np.testing.assert_allclose(got, want, atol=1e-5)


def test_bad_score_mods_raise(rng):
    q, k, v = qkv(rng, b=1, h_q=2, s_q=8, d=16)
    with pytest.raises(pasa.PasaError, match=r"^window_size: \(-2, 0\) must hold integers"):
        pasa.attention(q, k, v, window_size=(-2, 0))
    with pytest.raises(pasa.PasaError, match=r"^window_size: expected a pair"):
        pasa.attention(q, k, v, window_size=3)
    with pytest.raises(pasa.PasaError, match=r"^softcap: -1.0 must be finite"):
        pasa.attention(q, k, v, softcap=-1.0)
    with pytest.raises(pasa.PasaError, match=r"^softcap: PASA's shifted scores"):
        pasa.attention(q, k, v, softcap=30.0, policy="pasa")
    with pytest.raises(pasa.PasaError, match=r"^attn_mask: shape \(3, 8, 8\) does not broadcast"):
        pasa.attention(q, k, v, attn_mask=np.ones((3, 8, 8), bool))
    with pytest.raises(pasa.PasaError, match=r"^attn_mask: unsupported dtype int32"):
        pasa.attention(q, k, v, attn_mask=np.ones((8, 8), np.int32))
    bad = np.zeros((8, 8), np.float32)
    bad[2, 3] = np.nan
    with pytest.raises(pasa.PasaError, match=r"^attn_mask: nan at \[0, 0, 2, 3\]"):
        pasa.attention(q, k, v, attn_mask=bad)


def test_ml_dtypes_bfloat16_arrays(rng):
    ml_dtypes = pytest.importorskip("ml_dtypes", reason="ml_dtypes is not installed")
    q, k, v = qkv(rng, b=1, h_q=2, s_q=9, d=16)
    qb, kb, vb = (x.astype(ml_dtypes.bfloat16) for x in (q, k, v))
    got = pasa.attention(qb, kb, vb, causal=True)
    assert got.dtype == ml_dtypes.bfloat16
    q32, k32, v32 = (x.astype(np.float32) for x in (qb, kb, vb))
    want = pasa.attention(q32, k32, v32, causal=True).astype(ml_dtypes.bfloat16)
    np.testing.assert_array_equal(got.astype(np.float32), want.astype(np.float32))
    np.testing.assert_array_equal(pasa.reference(qb, kb, vb), pasa.reference(q32, k32, v32))


def test_ml_dtypes_bfloat16_output_saturates_where_v_is_quantized(rng):
    # A quantized V saturates a 16-bit O at its largest finite value (docs/api.md): the bfloat16 arrays'
    # float32 detour must not round values near bfloat16's top to inf. The torch path writes bfloat16
    # in the core; both give the same bits.
    ml_dtypes = pytest.importorskip("ml_dtypes", reason="ml_dtypes is not installed")
    q, k, _ = qkv(rng, b=1, h_q=2, s_q=70, d=64)
    v = np.full(k.shape, 3.38e38, np.float32)
    qb, kb, vb = (x.astype(ml_dtypes.bfloat16) for x in (q, k, v))
    for policy in ("sage4", "sage8", "exact,v_quant=e4m3"):
        got = pasa.attention(qb, kb, vb, policy=policy).astype(np.float32)
        assert np.isfinite(got).all(), policy
        assert np.abs(got).max() > 3.3e38, policy  # (saturated, not flushed)
        try:
            import torch
        except ImportError:
            continue
        via_torch = pasa.attention(*(torch.from_numpy(x.astype(np.float32)).bfloat16() for x in (qb, kb, vb)),
                                   policy=policy)
        np.testing.assert_array_equal(got, via_torch.float().numpy(), err_msg=policy)


def test_big_endian_float_masks_are_their_values(rng):
    q, k, v = qkv(rng, b=1, h_q=2, s_q=4, d=8)
    mask = rng.standard_normal((4, 4)).astype(np.float32)
    want = pasa.attention(q, k, v, attn_mask=mask)
    for dtype in (">f4", ">f2", ">f8"):
        got = pasa.attention(q, k, v, attn_mask=mask.astype(dtype))
        np.testing.assert_array_equal(got, pasa.attention(q, k, v, attn_mask=mask.astype(dtype).astype(
            np.dtype(dtype).newbyteorder("="))))
    np.testing.assert_array_equal(pasa.attention(q, k, v, attn_mask=mask.astype(">f4")), want)


def test_ml_dtypes_bfloat16_inputs_under_an_overlapping_out(rng):
    # The call checks out= against the float32 copies it is given: an out over a bfloat16 input was
    # accepted and wrote over it.
    ml_dtypes = pytest.importorskip("ml_dtypes", reason="ml_dtypes is not installed")
    buf = np.zeros(256, np.uint8)
    k = buf[:64].view(ml_dtypes.bfloat16).reshape(1, 1, 4, 8)
    k[...] = 1
    q = np.ones((1, 1, 4, 8), ml_dtypes.bfloat16)
    with pytest.raises(pasa.PasaError, match=r"^out: its memory overlaps k's"):
        pasa.attention(q, k, q, out=buf[:128].view(np.float32).reshape(1, 1, 4, 8))
    assert (k.astype(np.float32) == 1).all()


def test_ml_dtypes_bfloat16_out_is_checked_before_the_work(rng):
    ml_dtypes = pytest.importorskip("ml_dtypes", reason="ml_dtypes is not installed")
    q, k, v = (x.astype(ml_dtypes.bfloat16) for x in qkv(rng, b=1, h_q=2, s_q=4, d=8))
    wrong = np.zeros((3,) + q.shape[1:], ml_dtypes.bfloat16)  # would broadcast
    with pytest.raises(pasa.PasaError, match=r"^out: shape"):
        pasa.attention(q, k, v, out=wrong)
    assert not wrong.any()
    frozen = np.zeros_like(q)
    frozen.flags.writeable = False
    with pytest.raises(pasa.PasaError, match=r"^out: array is read-only"):
        pasa.attention(q, k, v, out=frozen)
    q_before = q.copy()
    with pytest.raises(pasa.PasaError, match=r"overlaps q's"):
        pasa.attention(q, k, v, out=q)
    np.testing.assert_array_equal(q.astype(np.float32), q_before.astype(np.float32))
    # An out whose strides address an element twice would lose results: refused as for float32.
    broadcast = np.lib.stride_tricks.as_strided(np.zeros(8, ml_dtypes.bfloat16), q.shape, (0, 0, 0, 2))
    interleaved = np.lib.stride_tricks.as_strided(np.zeros(64, ml_dtypes.bfloat16), q.shape, (64, 16, 16, 2))
    for bad in (broadcast, interleaved):
        with pytest.raises(pasa.PasaError, match=r"^out: sizes .* address some elements more than once"):
            pasa.attention(q, k, v, out=bad)
    memory = np.zeros(q.size * 2, np.uint8)  # the out and a float32 mask on the same bytes
    shared_out = memory.view(ml_dtypes.bfloat16).reshape(q.shape)
    mask = memory[:q.shape[2] * k.shape[2] * 4].view(np.float32).reshape(q.shape[2], k.shape[2])
    with pytest.raises(pasa.PasaError, match=r"overlaps attn_mask's"):
        pasa.attention(q, k, v, out=shared_out, attn_mask=mask)
    out = np.zeros_like(q)
    assert pasa.attention(q, k, v, out=out) is out and out.astype(np.float32).any()


def test_ml_dtypes_bfloat16_packed_and_cache_calls_are_refused(rng):
    ml_dtypes = pytest.importorskip("ml_dtypes", reason="ml_dtypes is not installed")
    x = rng.standard_normal((20, 2, 8)).astype(ml_dtypes.bfloat16)
    with pytest.raises(pasa.PasaError, match=r"^q: NumPy arrays of ml_dtypes' bfloat16"):
        pasa.attention(x, x, x, cu_seqlens_q=[0, 20], cu_seqlens_k=[0, 20], max_seqlen_q=20, max_seqlen_k=20)
    cache = np.zeros((1, 32, 2, 8), ml_dtypes.bfloat16)
    with pytest.raises(pasa.PasaError, match=r"ml_dtypes' bfloat16"):
        pasa.attention_with_kvcache(x[None, :1], cache, cache, cache_seqlens=[4])


def test_arrays_of_fewer_than_three_dimensions_are_pasa_errors():
    a, b = np.ones((4, 8), np.float32), np.ones((1, 2, 4, 8), np.float32)
    for args, name in (((a, b, b), "q"), ((b, a, a), "k")):
        for call in (pasa.attention, pasa.reference):
            with pytest.raises(pasa.PasaError, match=rf"^{name}: expected a 4-D array"):
                call(*args)
