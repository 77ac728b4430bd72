# SPDX-License-Identifier: Apache-2.0
"""pasa.attention, pasa.sdpa and pasa.reference: array-agnostic entry points.

NumPy (and other host) arrays run on the CPU backends, the policy emulator included; CUDA arrays run
on the kernels. torch tensors go through the ``pasa::attention`` custom op (``pasa._torch``), so
``torch.compile`` traces them and CUDA graphs capture them.
"""

from __future__ import annotations

import contextlib
import functools
import numbers
import re
from typing import Any, Optional, Tuple, Union

import numpy as np

from . import _core, _serving
from ._arrays import (allocate_outputs, as_kernel_argument, check_array, check_distinct_elements, check_not_meta,
                      check_sign_bits, check_strided, check_writable, is_cupy_array, is_ml_dtypes_bfloat16,
                      is_ml_dtypes_bfloat16_dtype, is_torch_tensor, new_host_output)
from ._errors import SDPA_ARGUMENT_NAMES, PasaError, alignment_argument, flag_argument, real_argument
from ._fallback import compiling
from ._policy import PolicyLike, core_policy, policy_text
from ._score_mods import check_softcap, check_window, mask_shape, numpy_mask, unsupported_mask_dtype

__all__ = ["attention", "sdpa", "reference"]

_LAYOUTS = ("bhsd", "bshd")


def _check_options(causal: Any, causal_alignment: Any, scale: Any, layout: Any,
                   return_lse: Any) -> Optional[float]:
    flag_argument(causal, "causal")
    alignment_argument(causal_alignment)
    if not isinstance(layout, str):  # (an array's `in` has no single truth)
        raise PasaError(f"layout: expected 'bhsd' or 'bshd', got {type(layout).__name__}")
    if layout not in _LAYOUTS:
        raise PasaError(f"layout: {layout!r} is not 'bhsd' ([B, H, S, D]) or 'bshd' ([B, S, H, D])")
    flag_argument(return_lse, "return_lse")
    if scale is None:
        return None
    if isinstance(scale, (bool, np.bool_)) or not isinstance(scale, numbers.Real):
        raise PasaError(f"scale: expected a number or None, got {type(scale).__name__}")
    return real_argument(scale, "scale")


def _check_stream(stream: Any) -> None:
    if stream is None:
        return
    if isinstance(stream, (bool, np.bool_)) or not isinstance(stream, numbers.Integral):
        raise PasaError(f"stream: expected a CUDA stream handle (an int) or None, got "
                        f"{type(stream).__name__}")
    if not 0 <= int(stream) < 2**64:
        raise PasaError(f"stream: {int(stream)} is not a stream handle (0 <= handle < 2**64)")


def attention(
    q: Any,
    k: Any,
    v: Any,
    *,
    policy: PolicyLike = "exact",
    causal: bool = False,
    causal_alignment: str = "bottom_right",
    scale: Optional[float] = None,
    layout: str = "bhsd",
    return_lse: bool = False,
    out: Optional[Any] = None,
    stream: Optional[int] = None,
    window_size: Optional[Tuple[int, int]] = None,
    softcap: Optional[float] = None,
    attn_mask: Optional[Any] = None,
    cu_seqlens_q: Optional[Any] = None,
    cu_seqlens_k: Optional[Any] = None,
    max_seqlen_q: Optional[int] = None,
    max_seqlen_k: Optional[int] = None,
) -> Union[Any, Tuple[Any, Any]]:
    """Softmax attention ``softmax(scale * q k^T) v`` under a precision policy.

    Args:
        q: ``[B, H_q, S_q, D]`` (``[B, S_q, H_q, D]`` with ``layout="bshd"``); float32, float16 or
            bfloat16; a NumPy array, a torch tensor, or any DLPack array (CuPy, JAX, ...). Host
            arrays run on the CPU emulator, CUDA arrays on the kernels. The head dim must be
            contiguous.
        k: ``[B, H_kv, S_kv, D]``; ``H_q`` must be a multiple of ``H_kv`` (GQA / MQA).
        v: same shape as ``k``.
        policy: policy text (``"exact"``, ``"pasa"``, ``"fa16,s2=64"``, ...) or a :class:`Policy`.
        causal: mask keys after the query's position.
        causal_alignment: ``"bottom_right"`` (query ``i`` sees keys ``<= i + S_kv - S_q``, what
            decoding with a KV cache needs) or ``"top_left"`` (keys ``<= i``, torch's
            ``is_causal``).
            A fully masked row gives ``O = 0`` and ``LSE = -inf``.
        scale: the softmax scale; ``1/sqrt(D)`` when None.
        layout: ``"bhsd"`` or ``"bshd"``; the output has the same layout as ``q``.
        return_lse: also return the natural-log log-sum-exp, float32 ``[B, H_q, S_q]``.
        out: where to write the output (same shape as ``q``; float32, float16 or bfloat16). By
            default a new array of ``q``'s kind, shape and dtype.
        stream: CUDA stream handle (``cudaStream_t`` as an int) for device arrays that are neither
            torch nor CuPy; torch and CuPy calls use their current stream.
        window_size: flash-attn's sliding window ``(left, right)``: query ``i`` sees keys
            ``o - left <= j <= o + right`` with ``o`` its diagonal (``i + S_kv - S_q`` bottom-right,
            ``i`` top-left); -1 leaves a side unbounded. Composes with ``causal``.
        softcap: logit softcap (Gemma 2): the scaled scores ``s`` become
            ``softcap * tanh(s / softcap)``; None or 0 for none. Not with ``shift=pasa``.
        attn_mask: torch SDPA's ``attn_mask`` for ``[B, H_q, S_q, S_kv]`` (broadcastable, e.g.
            ``[B, 1, 1, S_kv]`` padding): bool (True takes part) or float (added to the scaled,
            soft-capped scores; -inf hides a key). Same array kind as ``q``.
            On CUDA arrays the window, softcap and mask run with the ``exact`` policy, on either
            kernel path (other policies raise PasaError naming them; ``pasa.patch`` and the
            transformers and diffusers integrations then fall back to torch).
        cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k: packed variable-length batches
            (flash-attn's varlen names): q is ``[total_q, H_q, D]``, k and v ``[total_k, H_kv, D]``;
            sequence ``b`` owns tokens ``cu_seqlens[b]:cu_seqlens[b+1]`` (integers ``[B + 1]``, on
            q's device). The output is ``[total_q, H_q, D]``, the LSE ``[H_q, total_q]``; tokens
            outside ``cu_seqlens_q[0]:cu_seqlens_q[B]`` are not written (a new output holds 0
            there, a new LSE -inf; an ``out=`` keeps what it held). Host arrays run on the CPU emulator, torch
            CUDA tensors on the GPU: there the offsets are copied to the host (waiting for torch's
            current stream) and each sequence runs as the dense call, so such a call cannot be
            captured in a CUDA graph (it raises PasaError inside one). Not with ``window_size``,
            ``softcap`` or ``attn_mask``.

    Returns:
        The output, or ``(output, lse)`` when ``return_lse`` is True.

    Raises:
        PasaError: bad input (shapes, dtypes, strides, devices, non-finite values on the CPU,
            policy text), with a message naming the argument. Shape messages give ``[B, H, S, D]``.
    """
    scale_value = _check_options(causal, causal_alignment, scale, layout, return_lse)
    _check_stream(stream)
    window, cap = check_window(window_size), check_softcap(softcap)
    if cu_seqlens_q is None and cu_seqlens_k is None and (max_seqlen_q is not None or max_seqlen_k is not None):
        raise PasaError("max_seqlen_q: max_seqlen_q and max_seqlen_k describe packed inputs; pass them with "
                        "cu_seqlens_q and cu_seqlens_k")
    if cu_seqlens_q is not None or cu_seqlens_k is not None:
        if window_size is not None or softcap or attn_mask is not None:
            raise PasaError("cu_seqlens_q: packed inputs take no window_size, softcap or attn_mask yet")
        if layout != "bhsd":
            raise PasaError(f"layout: {layout!r} does not apply to packed inputs, which are [total, H, D]; "
                            f"leave layout at its default")
        if cu_seqlens_q is None or cu_seqlens_k is None or max_seqlen_q is None or max_seqlen_k is None:
            raise PasaError("cu_seqlens_q: packed inputs need cu_seqlens_q, cu_seqlens_k, "
                            "max_seqlen_q and max_seqlen_k together")
        return _serving.attention_varlen(
            q, k, v, cu_seqlens_q=cu_seqlens_q, cu_seqlens_k=cu_seqlens_k, max_seqlen_q=max_seqlen_q,
            max_seqlen_k=max_seqlen_k, policy=policy, causal=bool(causal),
            causal_alignment=causal_alignment, scale=scale_value, return_lse=bool(return_lse), out=out)
    if is_torch_tensor(q) or is_torch_tensor(k) or is_torch_tensor(v):
        _torch = _torch_backend()
        return _torch.attention(q, k, v, policy=policy_text(policy), causal=bool(causal),
                                causal_alignment=causal_alignment, scale=scale_value,
                                layout=layout, return_lse=bool(return_lse), out=out,
                                window_size=window, softcap=cap, attn_mask=attn_mask)
    for name, x in (("q", q), ("k", k), ("v", v)):
        check_array(x, name)
    if any(is_ml_dtypes_bfloat16(x) for x in (q, k, v, out)):
        return _attention_via_float32(q, k, v, out, policy=policy, causal=causal,
                                      causal_alignment=causal_alignment, scale=scale_value,
                                      layout=layout, return_lse=return_lse, window_size=window,
                                      softcap=cap, attn_mask=attn_mask)
    core = core_policy(policy)
    mask, mask_kind = numpy_mask(attn_mask, mask_shape(tuple(q.shape), tuple(k.shape), layout))
    # CuPy arrays: allocate and launch on q's device (the kernels use the current device).
    with q.device if is_cupy_array(q) else contextlib.nullcontext():
        o, lse, stream_handle = allocate_outputs(q, layout, bool(return_lse), out, stream)
        q, k, v, o_arg, lse_arg = (None if x is None else as_kernel_argument(x)
                                   for x in (q, k, v, o, lse))
        _core.attention(q, k, v, o_arg, lse_arg, core, bool(causal), causal_alignment,
                        scale_value, layout, stream_handle, window_left=window[0],
                        window_right=window[1], softcap=cap, mask=mask, mask_kind=mask_kind)
    return (o, lse) if return_lse else o


_torch_module = None


def _torch_backend() -> Any:
    """pasa._torch, imported on the first call with a torch tensor (an import statement in the call
    would cost a microsecond on every call)."""
    global _torch_module
    if _torch_module is None:
        from . import _torch

        _torch_module = _torch
    return _torch_module


def _refuse_overlaps(out: Any, named: Any) -> None:
    """PasaError where ``out`` shares memory with one of the (name, array) pairs ``named``, arrays the
    call does not see beside it (it gets float32 copies of them, or a float32 stand-in for out)."""
    for name, x in named:
        if isinstance(x, np.ndarray) and np.may_share_memory(out, x):
            raise PasaError(f"out: its memory overlaps {name}'s; pass an output that does not alias the inputs")


def _attention_via_float32(q: Any, k: Any, v: Any, out: Optional[Any], **options: Any) -> Any:
    """pasa.attention on NumPy arrays where some hold ml_dtypes' bfloat16: those are widened to
    float32 (exact), and a bfloat16 output is rounded from the float32 result to nearest even."""
    if out is not None:  # (the call checks out= against the float32 copies of the bfloat16 inputs)
        _refuse_overlaps(out, [(name, x) for name, x in (("q", q), ("k", k), ("v", v)) if is_ml_dtypes_bfloat16(x)])
    try:
        q32, k32, v32 = (x.astype(np.float32) if is_ml_dtypes_bfloat16(x) else x for x in (q, k, v))
    except MemoryError:
        raise PasaError("q/k/v: out of memory widening the bfloat16 inputs to float32") from None
    wanted = q.dtype if out is None else out.dtype
    if out is not None and not is_ml_dtypes_bfloat16(out):
        result = attention(q32, k32, v32, out=out, **options)
    elif out is not None:
        # A bfloat16 out: checked as the call checks any output, before the work, through a float32
        # array of its shape (whose shape the call checks), then written once the result is in.
        check_writable(out, "out")
        check_distinct_elements(out, "out")
        _refuse_overlaps(out, (("q", q), ("k", k), ("v", v), ("attn_mask", options["attn_mask"])))
        result = attention(q32, k32, v32, out=new_host_output(tuple(out.shape), np.float32, "out"), **options)
    else:
        result = attention(q32, k32, v32, **options)
    o, lse = result if options["return_lse"] else (result, None)
    if is_ml_dtypes_bfloat16_dtype(wanted):
        if core_policy(options["policy"]).get("v_quant") != "none":
            # Where V is quantized the core saturates a 16-bit O at its largest finite value (docs/api.md).
            # Its output here was float32, so bfloat16's saturation comes before the rounding, which
            # alone would take values near 2^128 to inf. NaN stays NaN.
            import ml_dtypes

            top = float(ml_dtypes.finfo(wanted).max)
            o = np.clip(o, -top, top)
        if out is not None:
            out[...] = o.astype(wanted)
            o = out
        else:
            o = o.astype(wanted)
    return (o, lse) if options["return_lse"] else o


def _dtype_name(x: Any) -> str:
    """x's dtype as NumPy names it, whatever its byte order (torch.float16 -> "float16", torch.bool
    -> "bool", ">f4" -> "float32")."""
    name = getattr(x.dtype, "name", None)
    return name if isinstance(name, str) else str(x.dtype).replace("torch.", "")


def sdpa(
    query: Any,
    key: Any,
    value: Any,
    attn_mask: Optional[Any] = None,
    dropout_p: float = 0.0,
    is_causal: bool = False,
    scale: Optional[float] = None,
    enable_gqa: bool = False,
    *,
    policy: PolicyLike = "exact",
    window_size: Optional[Tuple[int, int]] = None,
    softcap: Optional[float] = None,
) -> Any:
    """A drop-in for ``torch.nn.functional.scaled_dot_product_attention`` (torch's semantics).

    ``query`` is ``[N, H_q, L, E]`` or ``[H_q, L, E]``, ``key``/``value`` ``[N, H_kv, S, E]`` or
    ``[H_kv, S, E]``; ``is_causal`` is top-left aligned, as in torch; ``attn_mask`` is bool (True takes
    part) or float (added to the scores), of at least 2 dims broadcastable to ``[N, H_q, L, S]``. Works on torch
    tensors (through the ``pasa::attention`` custom op) and on NumPy arrays. ``window_size`` and
    ``softcap`` are pasa's additions (see :func:`attention`; the window is top-left aligned here).
    What pasa does not compute raises :class:`PasaError` instead of computing something else:
    ``dropout_p`` other than 0, differing head counts without ``enable_gqa=True``, and on CUDA
    tensors a mask, window or softcap under any policy but ``exact``. So do the dtypes torch refuses:
    query, key and value of differing dtypes, a mask neither bool, float32 nor the query's dtype.
    """
    if isinstance(dropout_p, (bool, np.bool_)) or not isinstance(dropout_p, numbers.Real):
        raise PasaError(f"dropout_p: expected a number, got {type(dropout_p).__name__}")
    if dropout_p != 0.0:
        raise PasaError(
            f"dropout_p: pasa.sdpa has no dropout (got {dropout_p}); pass dropout_p=0.0 "
            f"(inference) or use torch's scaled_dot_product_attention for training"
        )
    flag_argument(enable_gqa, "enable_gqa")
    # (torch takes a bool only: not 0 or 1, nor a 0-d tensor; NumPy's bool, and the symbolic bool that
    # torch.compile may trace a computed flag as, are bools too)
    if not isinstance(is_causal, (bool, np.bool_)) and type(is_causal).__name__ != "SymBool":
        raise PasaError(f"is_causal: expected True or False, got {is_causal!r}")
    if attn_mask is not None and is_causal:  # torch refuses the pair too
        raise PasaError("attn_mask: given with is_causal=True; torch takes one or the other (fold the "
                        "causal mask into attn_mask)")
    for name, x in (("query", query), ("key", key), ("value", value)):
        if getattr(x, "is_nested", False) is True:  # (whose shape torch cannot even give)
            raise PasaError(f"{name}: a nested tensor; pasa takes dense (strided) tensors")
        if not hasattr(x, "shape") or len(x.shape) not in (3, 4):
            shape = tuple(x.shape) if hasattr(x, "shape") else type(x).__name__
            raise PasaError(f"{name}: expected a 4-D [N, H, L, E] or 3-D [H, L, E] array, "
                            f"got {shape}")
    if is_torch_tensor(query):  # (under torch.autocast, torch's SDPA runs in the autocast dtype)
        query, key, value, attn_mask = _torch_backend().autocast_operands(query, key, value, attn_mask)
    if not len(query.shape) == len(key.shape) == len(value.shape):
        raise PasaError(
            f"key: query, key and value must have the same rank, got {len(query.shape)}-D, "
            f"{len(key.shape)}-D and {len(value.shape)}-D"
        )
    # torch's dtype rules, so that a call pasa.sdpa takes is one torch's SDPA takes too
    # (an unsupported dtype is named by pasa.attention's checks)
    dtype_names = [_dtype_name(x) for x in (query, key, value)]
    if len(set(dtype_names)) != 1 and set(dtype_names) <= {"float16", "bfloat16", "float32"}:
        raise PasaError(f"key/value: dtypes {dtype_names[1]}/{dtype_names[2]} differ from query's {dtype_names[0]} "
                        f"(torch's scaled_dot_product_attention takes one dtype: cast them)")
    if attn_mask is not None and len(getattr(attn_mask, "shape", (0, 0))) < 2:
        raise PasaError(f"attn_mask: a {len(attn_mask.shape)}-D mask; torch's scaled_dot_product_attention "
                        f"takes one of at least 2 dims, [..., L, S]")
    if attn_mask is not None and hasattr(attn_mask, "dtype"):
        mask_dtype = _dtype_name(attn_mask)
        if mask_dtype not in ("bool", "float32", dtype_names[0]):
            raise PasaError(f"attn_mask: dtype {mask_dtype} is neither bool, float32 nor the query's "
                            f"{dtype_names[0]} (as torch's scaled_dot_product_attention requires)")
    three_d = len(query.shape) == 3
    if three_d:  # [H, L, E], as torch reads 3-D operands (its GQA groups dim -3): [1, H, L, E]
        query, key, value = query[None], key[None], value[None]
    heads_q, heads_kv = query.shape[1], key.shape[1]
    if heads_q != heads_kv and not enable_gqa:
        raise PasaError(
            f"key: {heads_kv} heads differ from query's {heads_q}; pass enable_gqa=True for "
            f"grouped-query attention (as torch requires)"
        )
    run = functools.partial(attention, query, key, value, policy=policy, causal=bool(is_causal),
                            causal_alignment="top_left", scale=scale, layout="bhsd",
                            window_size=window_size, softcap=softcap, attn_mask=attn_mask)
    # (Dynamo cannot trace a handler of the error a traced call raises: raised as it is; only torch
    # tensors are traced, and only with them is torch imported)
    if is_torch_tensor(query) and compiling():
        result = run()
    else:
        try:
            result = run()
        except PasaError as e:  # (named as this function's arguments are: query, not attention's q)
            raise type(e)(_sdpa_argument_names(str(e))) from None
    return result[0] if three_d else result


def _sdpa_argument_names(message: str) -> str:
    """``message`` with the arguments it opens with ("q: ...", "k/v: ...") and the ones it compares
    them to ("... differs from k's") named as sdpa's are."""
    head, colon, rest = message.partition(":")
    names = head.split("/")
    if not colon or not all(n in SDPA_ARGUMENT_NAMES for n in names):
        return message
    rest = re.sub(r"\b([qkv])'s\b", lambda m: SDPA_ARGUMENT_NAMES[m.group(1)] + "'s", rest)
    return "/".join(SDPA_ARGUMENT_NAMES[n] for n in names) + colon + rest


def reference(
    q: Any,
    k: Any,
    v: Any,
    *,
    policy: PolicyLike = "exact",
    causal: bool = False,
    causal_alignment: str = "bottom_right",
    scale: Optional[float] = None,
    layout: str = "bhsd",
    return_lse: bool = False,
    window_size: Optional[Tuple[int, int]] = None,
    softcap: Optional[float] = None,
    attn_mask: Optional[Any] = None,
) -> Union[np.ndarray, Tuple[np.ndarray, np.ndarray]]:
    """fp64 attention, the oracle every other path is measured against.

    Same arguments as :func:`attention`; the inputs are rounded to ``policy``'s input format, then
    everything is computed in float64. Host arrays only (torch tensors are copied to the host).
    Returns a float64 NumPy array in ``q``'s layout, and with ``return_lse`` the float64 LSE
    ``[B, H_q, S_q]``.
    """
    scale_value = _check_options(causal, causal_alignment, scale, layout, return_lse)
    window, cap = check_window(window_size), check_softcap(softcap)
    for name, x in (("q", q), ("k", k), ("v", v), ("attn_mask", attn_mask)):
        check_not_meta(x, name)
    if is_torch_tensor(attn_mask):  # to NumPy, which has no bfloat16 (widening is exact)
        check_strided(attn_mask, "attn_mask")
        check_sign_bits(attn_mask, "attn_mask")
        host = attn_mask.detach().cpu()
        mask_dtype = str(host.dtype).replace("torch.", "")
        if mask_dtype not in ("bool", "float16", "bfloat16", "float32", "float64"):  # (what NumPy has not)
            raise unsupported_mask_dtype(mask_dtype)
        attn_mask = (host.float() if str(host.dtype) == "torch.bfloat16" else host).numpy()
    arrays = []
    for name, x in (("q", q), ("k", k), ("v", v)):
        if is_torch_tensor(x):
            x = x.detach().cpu()
        check_array(x, name)
        if is_ml_dtypes_bfloat16(x):
            x = x.astype(np.float32)  # exact
        arrays.append(x)
    mask, mask_kind = numpy_mask(attn_mask, mask_shape(tuple(arrays[0].shape),
                                                       tuple(arrays[1].shape), layout))
    o, lse = _core.reference(arrays[0], arrays[1], arrays[2], core_policy(policy), bool(causal),
                             causal_alignment, scale_value, layout, window_left=window[0],
                             window_right=window[1], softcap=cap, mask=mask, mask_kind=mask_kind)
    if layout == "bshd":
        o = np.ascontiguousarray(o.transpose(0, 2, 1, 3))
    return (o, lse) if return_lse else o
