# SPDX-License-Identifier: Apache-2.0
"""Every class of bad input raises pasa.PasaError (a ValueError) whose message names the argument,
before any output is written."""

from __future__ import annotations

import numpy as np
import pytest

import pasa

from conftest import qkv


def raises(match):
    return pytest.raises(pasa.PasaError, match=match)


def test_pasa_error_is_a_value_error():
    assert issubclass(pasa.PasaError, ValueError)
    assert pasa.PasaError.__module__ == "pasa"


@pytest.mark.parametrize("which", ["q", "k", "v"])
def test_wrong_ndim(rng, which):
    args = dict(zip("qkv", qkv(rng, 1, 2, 2, 8, 8, 64)))
    args[which] = args[which][0]
    with raises(rf"^{which}: expected a 4-D array \[B, H, S, D\] \(layout 'bhsd'\), got 3-D"):
        pasa.attention(args["q"], args["k"], args["v"])


def test_wrong_ndim_names_bshd(rng):
    q, k, v = qkv(rng, 1, 2, 2, 8, 8, 64)
    with raises(r"^q: expected a 4-D array \[B, S, H, D\] \(layout 'bshd'\), got 5-D"):
        pasa.attention(q[None], k, v, layout="bshd")


def test_mismatched_shapes(rng):
    q, k, v = qkv(rng, 2, 4, 2, 8, 10, 64)
    with raises(r"^v: shape .* differs from k's"):
        pasa.attention(q, k, v[:, :, :9])
    with raises(r"^k: head dim 32 differs from q's 64"):
        pasa.attention(q, k[..., :32], v[..., :32])
    with raises(r"^k/v: batch sizes"):
        pasa.attention(q, k[:1], v[:1])
    with raises(r"^k: 3 K/V heads do not divide the 4 query heads"):
        pasa.attention(q, *qkv(rng, 2, 3, 3, 10, 10, 64)[1:])


@pytest.mark.parametrize("dtype,name", [(np.float64, "float64"), (np.int32, "int32"),
                                        (np.int8, "int8"), (np.bool_, "bool"),
                                        (np.complex64, "complex64")])
@pytest.mark.parametrize("which", ["q", "k", "v"])
def test_unsupported_dtype(rng, dtype, name, which):
    args = dict(zip("qkv", qkv(rng, 1, 2, 2, 8, 8, 64)))
    args[which] = args[which].astype(dtype)
    with raises(rf"^{which}: unsupported dtype {name} \(pasa takes float32, float16 or bfloat16\)"):
        pasa.attention(args["q"], args["k"], args["v"])


@pytest.mark.parametrize("which", ["q", "k", "v", "out", "k_cache"])
def test_types_numpy_cannot_export_and_strides_in_part_elements_are_refused_by_name(rng, which):
    """ml_dtypes' float8_e5m2 (a float kind NumPy cannot hand over) and a structured array's field
    (strides not in whole elements) reached the binding, which raised a TypeError (or, for a cache, a
    byte-order PasaError)."""
    ml_dtypes = pytest.importorskip("ml_dtypes")
    q, k, v = qkv(rng, 1, 2, 2, 8, 8, 64)
    fielded = np.zeros((1, 2, 8, 64), np.dtype([("a", "<f4"), ("pad", "u1")]))["a"]
    for bad, match in ((q.astype(ml_dtypes.float8_e5m2), r"unsupported dtype float8_e5m2"),
                       (fielded, r"strides \(.*\) are not whole 4-byte elements")):
        if which == "k_cache":
            cache = bad.transpose(0, 2, 1, 3)
            with raises(rf"^k_cache: {match}"):
                pasa.attention_with_kvcache(q[:, :, :1].transpose(0, 2, 1, 3), cache, cache.copy(),
                                            cache_seqlens=4)
            continue
        args = dict(zip("qkv", (q, k, v)), out=np.empty_like(q))
        args[which] = bad
        with raises(rf"^{which}: {match}"):
            pasa.attention(args["q"], args["k"], args["v"], out=args["out"])


def test_masked_arrays_are_refused_by_name(rng, tmp_path):
    """A NumPy masked array's mask was ignored: its masked entries took part like any other."""
    q, k, v = qkv(rng, 1, 2, 2, 8, 8, 64)
    masked = np.ma.masked_array(k, mask=np.zeros(k.shape, bool))
    with raises(r"^k: a NumPy masked array, whose mask pasa would ignore"):
        pasa.attention(q, masked, v)
    with raises(r"^cache_seqlens: a NumPy masked array"):
        pasa.attention_with_kvcache(q.transpose(0, 2, 1, 3)[:, :1], k.transpose(0, 2, 1, 3),
                                    v.transpose(0, 2, 1, 3), cache_seqlens=np.ma.masked_array([4]))
    # A masked attn_mask (a padding mask built with np.ma) was taken as its data, its mask ignored.
    padding = np.ma.masked_array(np.zeros((8, 8), np.float32), mask=np.ones((8, 8), bool))
    with raises(r"^attn_mask: a NumPy masked array, whose mask pasa would ignore"):
        pasa.attention(q, k, v, attn_mask=padding)
    with raises(r"^attn_mask: a NumPy masked array"):
        pasa.reference(q, k, v, attn_mask=padding)
    # (pasa.save names the file; the fix is said of the array, not of a path as if it were a variable)
    with raises(r"m.npy: a NumPy masked array, whose mask pasa would ignore; pass the array's .filled\(value\)$"):
        pasa.save(tmp_path / "m.npy", masked)


def test_an_out_of_new_axes_is_taken(rng):
    """NumPy gives a new axis stride 0: out=o[None] was refused for its size-1 dimension's stride,
    which is never read."""
    q, k, v = (x[0] for x in qkv(rng, 1, 2, 2, 8, 8, 64))
    o = np.empty_like(q)
    pasa.attention(q[None], k[None], v[None], out=o[None])
    np.testing.assert_array_equal(o, pasa.attention(q[None], k[None], v[None])[0])


@pytest.mark.parametrize("which", ["q", "k", "v"])
def test_non_contiguous_head_dim(rng, which):
    args = dict(zip("qkv", qkv(rng, 1, 2, 2, 8, 8, 128)))
    args[which] = args[which][..., ::2]
    if which != "q":  # keep the head dims equal so the stride check is what fails
        args["q"] = args["q"][..., :64]
    with raises(rf"^{which}: the head dim \(last axis\) must be contiguous, but its stride is 2"):
        pasa.attention(args["q"], args["k"], args["v"])


def test_fortran_order_is_non_contiguous_head_dim(rng):
    q, k, v = qkv(rng, 1, 2, 2, 8, 8, 64)
    with raises(r"^q: the head dim \(last axis\) must be contiguous"):
        pasa.attention(np.asfortranarray(q), k, v)


@pytest.mark.parametrize("which", ["q", "k", "v", "out"])
def test_big_endian_arrays_are_refused_by_name(rng, which):
    args = dict(zip("qkv", qkv(rng, 1, 2, 2, 8, 8, 64)))
    args["out"] = np.empty_like(args["q"])
    args[which] = args[which].astype(args[which].dtype.newbyteorder(">"))
    with raises(rf"^{which}: a >f4 array is not in this machine's byte order"):
        pasa.attention(args["q"], args["k"], args["v"], out=args["out"])


def test_sdpa_refuses_a_mask_with_is_causal_and_stats_a_non_bool_reset(rng):
    q, k, v = qkv(rng, 1, 2, 2, 8, 8, 64)
    with raises(r"^attn_mask: given with is_causal=True"):
        pasa.sdpa(q, k, v, attn_mask=np.ones((8, 8), bool), is_causal=True)
    with raises(r"^reset: expected True or False, got 'yes'"):
        pasa.stats(reset="yes")


def test_output_strides_name_out(rng):
    q, k, v = qkv(rng, 1, 2, 2, 8, 8, 64)
    out = np.empty((1, 2, 16, 64), np.float32)[:, :, ::-2]
    with raises(r"^out: stride of the sequence dimension is -128 \(must be positive\)"):
        pasa.attention(q, k, v, out=out)


def test_negative_strides(rng):
    q, k, v = qkv(rng, 1, 2, 2, 8, 8, 64)
    with raises(r"^k: stride of the sequence dimension is -64"):
        pasa.attention(q, k[:, :, ::-1], v)


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
@pytest.mark.parametrize("which", ["q", "k", "v"])
def test_non_finite_inputs(rng, bad, which):
    args = dict(zip("qkv", qkv(rng, 1, 2, 2, 8, 8, 64)))
    args[which][0, 1, 5, 7] = bad
    out = np.full(args["q"].shape, 7.0, np.float32)
    with raises(rf"^{which}: non-finite value at \[b, h, s, d\] = \[0, 1, 5, 7\]"):
        pasa.attention(args["q"], args["k"], args["v"], out=out)
    assert np.all(out == 7.0)  # untouched
    with raises(rf"^{which}: non-finite value"):
        pasa.reference(args["q"], args["k"], args["v"])


@pytest.mark.parametrize("text,match", [
    ("", r"policy text is empty"),
    (",pasa", r"policy ',pasa': no preset before the first comma"),
    (" , s2=64", r"policy ' , s2=64': no preset before the first comma"),
    ("bogus", r"unknown policy 'bogus' \(presets: exact, fa16_fp32, fa16, pasa"),
    ("exact,zz=1", r"policy 'exact,zz=1': unknown key 'zz'"),
    ("exact,s2", r"'s2' is not key=value"),
    ("exact\0pasa", r"policy text: control character 0x00 at byte 5"),
    ("pasa,beta=1.5", r"policy field 'beta': 1.5 is outside \[0, 1\)"),
    ("pasa,beta=abc", r"policy field 'beta': 'abc' is not a number"),
    ("exact,s1=0", r"policy field 's1': block size 0 is outside 1..1024"),
    ("exact,input=fp12", r"policy field 'input'"),
])
def test_bad_policy_text(rng, text, match):
    q, k, v = qkv(rng, 1, 1, 1, 4, 4, 64)
    with raises(match):
        pasa.attention(q, k, v, policy=text)
    with raises(match):
        pasa.Policy(text)


def test_text_without_utf8_is_a_pasa_error(rng):
    # A lone surrogate (os.fsdecode of a file name's bytes) has no UTF-8: the binding raised TypeError.
    q, k, v = qkv(rng, 1, 1, 1, 4, 4, 64)
    for call in (lambda: pasa.Policy("exact\udcff"), lambda: pasa.attention(q, k, v, policy="\udcff"),
                 lambda: pasa.Policy.preset("\udcff"), lambda: pasa.beta(format="\udcff"),
                 lambda: pasa.Policy("exact").replace(p="\udcff")):
        with raises(r"is not valid text \(surrogates not allowed"):
            call()


def test_bad_policy_type(rng):
    q, k, v = qkv(rng, 1, 1, 1, 4, 4, 64)
    with raises(r"^policy: expected policy text .* got int"):
        pasa.attention(q, k, v, policy=3)


def test_empty_sequence(rng):
    q, k, v = qkv(rng, 1, 2, 2, 8, 8, 64)
    with raises(r"^k: sequence size is 0"):
        pasa.attention(q, k[:, :, :0], v[:, :, :0])
    with raises(r"^q: batch size is 0"):
        pasa.attention(q[:0], k[:0], v[:0])


def test_not_an_array(rng):
    q, k, v = qkv(rng, 1, 2, 2, 8, 8, 64)
    with raises(r"^k: expected an array .* got list"):
        pasa.attention(q, k.tolist(), v)


@pytest.mark.parametrize("kwargs,match", [
    (dict(layout="sbhd"), r"^layout: 'sbhd' is not 'bhsd'"),
    (dict(layout=np.zeros((2, 2))), r"^layout: expected 'bhsd' or 'bshd', got ndarray"),
    (dict(causal_alignment="top-left"), r"^causal_alignment: 'top-left' is not 'bottom_right'"),
    (dict(causal="yes"), r"^causal: expected True or False"),
    (dict(scale="0.1"), r"^scale: expected a number or None, got str"),
    (dict(scale=float("nan")), r"^scale: nan is not finite"),
    (dict(scale=float("inf")), r"^scale: inf is not finite"),
    (dict(return_lse=1), r"^return_lse: expected True or False"),
])
def test_bad_options(rng, kwargs, match):
    q, k, v = qkv(rng, 1, 2, 2, 8, 8, 64)
    with raises(match):
        pasa.attention(q, k, v, **kwargs)


def test_kvcache_options_are_checked_like_attention_s(rng):
    q = rng.standard_normal((1, 1, 1, 8)).astype(np.float32)
    cache = rng.standard_normal((1, 4, 1, 8)).astype(np.float32)
    for alignment in (None, 5, "top-left"):
        with raises(r"^causal_alignment: .* is not 'bottom_right'"):
            pasa.attention_with_kvcache(q, cache, cache.copy(), cache_seqlens=1, causal_alignment=alignment)


def test_sdpa_flags_and_masks_of_no_array_type(rng):
    q, k, v = qkv(rng, 1, 2, 2, 4, 4, 8)
    for flag in (np.array([True, False]), np.array(True), [], {}, 0, 1, 2, np.int64(1), 1.0, object(), None):
        with raises(r"^is_causal: expected True or False"):
            pasa.sdpa(q, k, v, is_causal=flag)
    with raises(r"^attn_mask: expected a NumPy array"):
        pasa.sdpa(q[:, 0], k[:, 0], v[:, 0], attn_mask=[[[True]]])


def test_a_mask_whose_strides_are_not_whole_elements_is_refused(rng):
    q, k, v = qkv(rng, 1, 1, 1, 3, 5, 8)
    field = np.zeros((3, 5), [("a", "i1"), ("b", "f4")])["b"]  # float32 with 5-byte strides
    for call in (pasa.attention, pasa.sdpa, pasa.reference):
        with raises(r"^attn_mask: strides \(25, 5\) are not whole 4-byte elements"):
            call(q, k, v, attn_mask=field)


def test_sdpa_refuses_masks_of_fewer_than_two_dims_as_torch_does(rng):
    q, k, v = qkv(rng, 1, 2, 2, 3, 4, 8)
    for mask in (np.ones(4, bool), np.zeros(4, np.float32), np.array(True)):
        with raises(r"^attn_mask: a [01]-D mask; torch's scaled_dot_product_attention takes one of at least 2"):
            pasa.sdpa(q, k, v, attn_mask=mask)
    # (two dims, [L, S], broadcast over batch and heads as torch does)
    two_d = np.ones((3, 4), bool)
    np.testing.assert_array_equal(pasa.sdpa(q, k, v, attn_mask=two_d), pasa.sdpa(q, k, v))


def test_bad_out(rng):
    q, k, v = qkv(rng, 1, 2, 2, 8, 8, 64)
    with raises(r"^out: shape \(1, 2, 8, 32\) differs from q's \(1, 2, 8, 64\)"):
        pasa.attention(q, k, v, out=np.empty((1, 2, 8, 32), np.float32))
    with raises(r"^out: unsupported dtype float64"):
        pasa.attention(q, k, v, out=np.empty(q.shape, np.float64))
    read_only = np.empty(q.shape, np.float32)
    read_only.flags.writeable = False
    with raises(r"^out: array is read-only"):
        pasa.attention(q, k, v, out=read_only)
    with raises(r"^out: expected an array"):
        pasa.attention(q, k, v, out=[0.0])


def test_an_out_overlapping_the_mask_is_named_out(rng):
    q = rng.standard_normal((1, 1, 8, 8)).astype(np.float32)
    buffer = np.zeros((1, 1, 8, 8), np.float32)
    with raises(r"^out: its memory overlaps attn_mask's"):
        pasa.attention(q, q, q, attn_mask=buffer[0, 0], out=buffer)


def test_head_dim_too_large_for_cpu(rng):
    q, k, v = qkv(rng, 1, 1, 1, 2, 2, 1040)
    with raises(r"^q: head dim 1040 is larger than the CPU backends' 1024"):
        pasa.attention(q, k, v)


def test_out_aliasing_an_input(rng):
    q, k, v = qkv(rng, 1, 2, 2, 8, 8, 64)
    with raises(r"^out: its memory overlaps q's"):
        pasa.attention(q, k, v, out=q)
    both = np.empty((2, 1, 2, 8, 64), np.float32)
    both[0] = k
    with raises(r"^out: its memory overlaps k's"):
        pasa.attention(q, both[0], v, out=both.reshape(2, 2, 8, 64)[:1])
    disjoint = np.empty((2, 1, 2, 8, 64), np.float32)
    disjoint[1] = k
    pasa.attention(q, disjoint[1], v, out=disjoint[0])  # neighbours, no overlap: fine


def test_out_whose_indices_share_elements(rng):
    q, k, v = qkv(rng, 1, 2, 2, 8, 8, 64)
    memory = np.full(2 * 8 * 64, 7.0, np.float32)
    # Each head starts one row after the previous: rows 1..7 of head 0 are rows 0..6 of head 1.
    overlapping = np.lib.stride_tricks.as_strided(memory, (1, 2, 8, 64), (4 * 1024, 4 * 64, 4 * 64, 4))
    with raises(r"^out: sizes \[1, 2, 8, 64\] with strides \[1024, 64, 64, 1\] address some elements more "
                r"than once"):
        pasa.attention(q, k, v, out=overlapping)
    assert (memory == 7.0).all()
    # The LSE output is the extension's (the torch op passes one): heads share their rows there.
    lse_memory = np.full(8, 7.0, np.float32)
    lse = np.lib.stride_tricks.as_strided(lse_memory, (1, 2, 8), (4 * 8, 4, 4))
    with raises(r"^lse: sizes \[1, 2, 8\] with strides \[8, 1, 1\] address some elements more than once"):
        pasa._core.attention(q, k, v, np.empty_like(q), lse, pasa.Policy("exact")._impl, False,
                             "bottom_right", None, "bhsd", 0)
    assert (lse_memory == 7.0).all()


def test_p_scale_that_underflows_the_largest_weight():
    with raises(r"^policy field 'p_scale': 1e-30 is too small: P = 1 \(the weight of a row's maximum\) times it is 0 "
                r"in e4m3 \(p\)"):
        pasa.Policy("sage8,p_scale=1e-30")
    assert pasa.Policy("sage8,p_scale=0.015625").p_scale == 0.015625
