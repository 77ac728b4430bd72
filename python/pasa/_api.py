# SPDX-License-Identifier: Apache-2.0
"""pasa.attention, pasa.sdpa and pasa.reference: array-agnostic entry points.

NumPy (and other host) arrays run on the CPU backends, the policy emulator included; CUDA arrays run
on the kernels. torch tensors go through the ``pasa::attention`` custom op (``pasa._torch``), so
``torch.compile`` traces them and CUDA graphs capture them.
"""

from __future__ import annotations

import contextlib
import numbers
from typing import Any, Optional, Tuple, Union

import numpy as np

from . import _core
from ._arrays import (allocate_outputs, as_kernel_argument, check_array, is_cupy_array,
                      is_torch_tensor)
from ._errors import PasaError, real_argument
from ._policy import PolicyLike, core_policy, policy_text

__all__ = ["attention", "sdpa", "reference"]

_LAYOUTS = ("bhsd", "bshd")
_ALIGNMENTS = ("bottom_right", "top_left")


def _check_options(causal: Any, causal_alignment: Any, scale: Any, layout: Any,
                   return_lse: Any) -> Optional[float]:
    if not isinstance(causal, (bool, np.bool_)):
        raise PasaError(f"causal: expected True or False, got {causal!r}")
    if causal_alignment not in _ALIGNMENTS:
        raise PasaError(
            f"causal_alignment: {causal_alignment!r} is not 'bottom_right' (query i sees keys "
            f"up to i + S_kv - S_q) or 'top_left' (keys up to i, torch's is_causal)"
        )
    if layout not in _LAYOUTS:
        raise PasaError(f"layout: {layout!r} is not 'bhsd' ([B, H, S, D]) or 'bshd' ([B, S, H, D])")
    if not isinstance(return_lse, (bool, np.bool_)):
        raise PasaError(f"return_lse: expected True or False, got {return_lse!r}")
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

    Returns:
        The output, or ``(output, lse)`` when ``return_lse`` is True.

    Raises:
        PasaError: bad input (shapes, dtypes, strides, devices, non-finite values on the CPU,
            policy text), with a message naming the argument. Shape messages give ``[B, H, S, D]``.
    """
    scale_value = _check_options(causal, causal_alignment, scale, layout, return_lse)
    _check_stream(stream)
    if is_torch_tensor(q) or is_torch_tensor(k) or is_torch_tensor(v):
        from . import _torch

        return _torch.attention(q, k, v, policy=policy_text(policy), causal=bool(causal),
                                causal_alignment=causal_alignment, scale=scale_value,
                                layout=layout, return_lse=bool(return_lse), out=out)
    for name, x in (("q", q), ("k", k), ("v", v)):
        check_array(x, name)
    core = core_policy(policy)
    # CuPy arrays: allocate and launch on q's device (the kernels use the current device).
    with q.device if is_cupy_array(q) else contextlib.nullcontext():
        o, lse, stream_handle = allocate_outputs(q, layout, bool(return_lse), out, stream)
        q, k, v, o_arg, lse_arg = (None if x is None else as_kernel_argument(x)
                                   for x in (q, k, v, o, lse))
        _core.attention(q, k, v, o_arg, lse_arg, core, bool(causal), causal_alignment,
                        scale_value, layout, stream_handle)
    return (o, lse) if return_lse else o


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
) -> Any:
    """A drop-in for ``torch.nn.functional.scaled_dot_product_attention`` (torch's semantics).

    ``query`` is ``[N, H_q, L, E]`` or ``[N, L, E]``, ``key``/``value`` ``[N, H_kv, S, E]`` or
    ``[N, S, E]``; ``is_causal`` is top-left aligned, as in torch. Works on torch tensors (through
    the ``pasa::attention`` custom op) and on NumPy arrays. What pasa does not compute raises
    :class:`PasaError` instead of computing something else: ``attn_mask`` other than None,
    ``dropout_p`` other than 0, and differing head counts without ``enable_gqa=True``.
    """
    if attn_mask is not None:
        raise PasaError(
            "attn_mask: pasa.sdpa supports no attention masks (only is_causal=True); call "
            "torch.nn.functional.scaled_dot_product_attention for masked attention"
        )
    if isinstance(dropout_p, (bool, np.bool_)) or not isinstance(dropout_p, numbers.Real):
        raise PasaError(f"dropout_p: expected a number, got {type(dropout_p).__name__}")
    if dropout_p != 0.0:
        raise PasaError(
            f"dropout_p: pasa.sdpa has no dropout (got {dropout_p}); pass dropout_p=0.0 "
            f"(inference) or use torch's scaled_dot_product_attention for training"
        )
    if not isinstance(enable_gqa, (bool, np.bool_)):
        raise PasaError(f"enable_gqa: expected True or False, got {enable_gqa!r}")
    for name, x in (("query", query), ("key", key), ("value", value)):
        if not hasattr(x, "shape") or len(x.shape) not in (3, 4):
            shape = tuple(x.shape) if hasattr(x, "shape") else type(x).__name__
            raise PasaError(f"{name}: expected a 4-D [N, H, L, E] or 3-D [N, L, E] array, "
                            f"got {shape}")
    if not len(query.shape) == len(key.shape) == len(value.shape):
        raise PasaError(
            f"key: query, key and value must have the same rank, got {len(query.shape)}-D, "
            f"{len(key.shape)}-D and {len(value.shape)}-D"
        )
    three_d = len(query.shape) == 3
    if three_d:
        query, key, value = query[:, None], key[:, None], value[:, None]
    heads_q, heads_kv = query.shape[1], key.shape[1]
    if heads_q != heads_kv and not enable_gqa:
        raise PasaError(
            f"key: {heads_kv} heads differ from query's {heads_q}; pass enable_gqa=True for "
            f"grouped-query attention (as torch requires)"
        )
    result = attention(query, key, value, policy=policy, causal=bool(is_causal),
                       causal_alignment="top_left", scale=scale, layout="bhsd")
    return result[:, 0] if three_d else result


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
) -> Union[np.ndarray, Tuple[np.ndarray, np.ndarray]]:
    """fp64 attention, the oracle every other path is measured against.

    Same arguments as :func:`attention`; the inputs are rounded to ``policy``'s input format, then
    everything is computed in float64. Host arrays only (torch tensors are copied to the host).
    Returns a float64 NumPy array in ``q``'s layout, and with ``return_lse`` the float64 LSE
    ``[B, H_q, S_q]``.
    """
    scale_value = _check_options(causal, causal_alignment, scale, layout, return_lse)
    arrays = []
    for name, x in (("q", q), ("k", k), ("v", v)):
        if is_torch_tensor(x):
            x = x.detach().cpu()
        check_array(x, name)
        arrays.append(x)
    o, lse = _core.reference(arrays[0], arrays[1], arrays[2], core_policy(policy), bool(causal),
                             causal_alignment, scale_value, layout)
    if layout == "bshd":
        o = np.ascontiguousarray(o.transpose(0, 2, 1, 3))
    return (o, lse) if return_lse else o
