# SPDX-License-Identifier: Apache-2.0
"""The serving layouts with flash-attn's names: packed variable-length batches (``cu_seqlens``) and
paged or dense KV caches (``block_table``, ``cache_seqlens``), on the CPU emulator (host arrays).

Each sequence's result is what :func:`pasa.attention` gives on that sequence alone.
"""

from __future__ import annotations

import numbers
from typing import Any, Optional, Tuple, Union

import numpy as np

from . import _core
from ._arrays import check_array, is_torch_tensor
from ._errors import PasaError
from ._policy import PolicyLike, core_policy

__all__ = ["attention_varlen", "attention_with_kvcache"]


def _host(x: Any, name: str) -> Any:
    """x, checked to be a host array (NumPy, torch CPU tensor, any DLPack host array)."""
    if is_torch_tensor(x):
        if x.device.type != "cpu":
            raise PasaError(f"{name}: on {x.device}; the varlen and KV-cache layouts run on the CPU "
                            f"emulator only (host arrays)")
        return x.detach()
    check_array(x, name)
    return x


def _int32(x: Any, name: str) -> np.ndarray:
    """An int32 array of integers (what cu_seqlens, cache_seqlens and block_table hold)."""
    if is_torch_tensor(x):
        x = x.detach().cpu().numpy()
    array = np.asarray(x)
    if array.dtype.kind not in "iu":
        raise PasaError(f"{name}: expected integers, got dtype {array.dtype}")
    if array.size and (array.min() < np.iinfo(np.int32).min or array.max() > np.iinfo(np.int32).max):
        raise PasaError(f"{name}: values do not fit in int32")
    return np.ascontiguousarray(array, dtype=np.int32)


def _empty_like(x: Any, shape: Tuple[int, ...], dtype: Any = None) -> Any:
    """A new host array of x's kind (torch or NumPy)."""
    if is_torch_tensor(x):
        import torch

        return torch.empty(shape, dtype=x.dtype if dtype is None else torch.float32)
    return np.empty(shape, dtype=x.dtype if dtype is None else dtype)


def _check_flag(value: Any, name: str) -> bool:
    if not isinstance(value, (bool, np.bool_)):
        raise PasaError(f"{name}: expected True or False, got {value!r}")
    return bool(value)


def _check_scale(scale: Any, name: str) -> Optional[float]:
    if scale is None:
        return None
    if isinstance(scale, (bool, np.bool_)) or not isinstance(scale, numbers.Real):
        raise PasaError(f"{name}: expected a number or None, got {type(scale).__name__}")
    return float(scale)


def attention_varlen(q: Any, k: Any, v: Any, *, cu_seqlens_q: Any, cu_seqlens_k: Any,
                     max_seqlen_q: int, max_seqlen_k: int, policy: PolicyLike, causal: bool,
                     causal_alignment: str, scale: Optional[float], return_lse: bool,
                     out: Optional[Any]) -> Union[Any, Tuple[Any, Any]]:
    """pasa.attention's packed path (its docstring describes the arguments)."""
    for name, value in (("max_seqlen_q", max_seqlen_q), ("max_seqlen_k", max_seqlen_k)):
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Integral):
            raise PasaError(f"{name}: expected an int, got {value!r}")
    arrays = [_host(x, name) for name, x in (("q", q), ("k", k), ("v", v))]
    if len(arrays[0].shape) != 3:
        raise PasaError(f"q: with cu_seqlens_q, expected a 3-D packed array [total_q, H_q, D], got "
                        f"shape {tuple(arrays[0].shape)}")
    total_q, heads_q = int(arrays[0].shape[0]), int(arrays[0].shape[1])
    if out is None:
        out = _empty_like(arrays[0], tuple(int(n) for n in arrays[0].shape))
    elif tuple(out.shape) != tuple(arrays[0].shape):
        raise PasaError(f"out: shape {tuple(out.shape)} differs from q's {tuple(arrays[0].shape)}")
    lse = _empty_like(arrays[0], (heads_q, total_q), np.float32) if return_lse else None
    _core.attention_varlen(arrays[0], arrays[1], arrays[2], out, lse, _int32(cu_seqlens_q, "cu_seqlens_q"),
                           _int32(cu_seqlens_k, "cu_seqlens_k"), int(max_seqlen_q), int(max_seqlen_k),
                           core_policy(policy), causal, causal_alignment, scale)
    return (out, lse) if return_lse else out


def attention_with_kvcache(
    q: Any,
    k_cache: Any,
    v_cache: Any,
    k: Optional[Any] = None,
    v: Optional[Any] = None,
    *,
    cache_seqlens: Any,
    block_table: Optional[Any] = None,
    causal: bool = False,
    causal_alignment: str = "bottom_right",
    softmax_scale: Optional[float] = None,
    policy: PolicyLike = "exact",
    return_softmax_lse: bool = False,
    out: Optional[Any] = None,
) -> Union[Any, Tuple[Any, Any]]:
    """Attention of ``q`` against a KV cache, with flash-attn's ``flash_attn_with_kvcache`` names.

    Args:
        q: ``[B, S_q, H_q, D]``, float32, float16 or bfloat16 (host arrays: NumPy, torch CPU).
        k_cache: paged ``[num_blocks, block_size, H_kv, D]`` with ``block_table``, or dense
            ``[B, S_max, H_kv, D]`` without. Written when ``k``/``v`` are given.
        v_cache: same shape and dtype as ``k_cache``.
        k, v: optional new keys and values ``[B, S_new, H_kv, D]`` (the cache's dtype), written into
            the cache at positions ``cache_seqlens[b] ..`` before attending.
        cache_seqlens: int ``[B]`` (or one int for every sequence): positions already in the cache.
            Sequence ``b`` attends to its first ``cache_seqlens[b] + S_new`` positions.
        block_table: int32 ``[B, max_blocks]``: position ``p`` of sequence ``b`` is slot
            ``p % block_size`` of block ``block_table[b, p // block_size]``.
        causal: mask keys after the query's position, bottom-right aligned by default (query ``i``
            sees keys ``<= i + cache_seqlens[b] + S_new - S_q``).
        softmax_scale: ``1/sqrt(D)`` when None.
        policy: precision policy text or :class:`Policy`.
        return_softmax_lse: also return the float32 LSE ``[B, H_q, S_q]``.
        out: where to write the output (``q``'s shape).

    Returns:
        The output ``[B, S_q, H_q, D]``, or ``(output, lse)``.

    Raises:
        PasaError: bad input, before anything (cache included) is written: block ids out of range,
            an append that does not fit, negative cache_seqlens, non-finite values, and every check
            of :func:`pasa.attention`.
    """
    causal = _check_flag(causal, "causal")
    return_softmax_lse = _check_flag(return_softmax_lse, "return_softmax_lse")
    scale = _check_scale(softmax_scale, "softmax_scale")
    q, k_cache, v_cache = (_host(x, name) for name, x in
                           (("q", q), ("k_cache", k_cache), ("v_cache", v_cache)))
    k, v = (None if x is None else _host(x, name) for name, x in (("k", k), ("v", v)))
    if len(q.shape) != 4:
        raise PasaError(f"q: expected a 4-D array [B, S_q, H_q, D], got shape {tuple(q.shape)}")
    batch, s_q, heads_q = (int(n) for n in q.shape[:3])
    if isinstance(cache_seqlens, numbers.Integral) and not isinstance(cache_seqlens, (bool, np.bool_)):
        cache_seqlens = np.full(batch, cache_seqlens)
    if out is None:
        out = _empty_like(q, tuple(int(n) for n in q.shape))
    lse = _empty_like(q, (batch, heads_q, s_q), np.float32) if return_softmax_lse else None
    _core.attention_with_kvcache(q, k_cache, v_cache, k, v, out, lse,
                                 _int32(cache_seqlens, "cache_seqlens"),
                                 None if block_table is None else _int32(block_table, "block_table"),
                                 core_policy(policy), causal, causal_alignment, scale)
    return (out, lse) if return_softmax_lse else out
