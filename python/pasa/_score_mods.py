# SPDX-License-Identifier: Apache-2.0
"""The arguments that change the scores before the softmax: ``window_size``, ``softcap`` and
``attn_mask``, checked and put in the form the extension takes (4-D masks broadcast to
``[B or 1, H_q or 1, S_q, S_kv]``, boolean masks as one byte per element)."""

from __future__ import annotations

import numbers
from typing import Any, Callable, Optional, Tuple

import numpy as np

from ._arrays import check_rank4, check_whole_strides
from ._errors import PasaError, real_argument

_INT32_MAX = 2**31 - 1
# A float64 additive mask is taken in float32, its finite values past float32's range saturating at
# its largest (a key hidden by -1e300 stays hidden, and a row of such keys averages them, as in fp64).
FLOAT32_MAX = float(np.finfo(np.float32).max)

#: The extension's defaults: no window, no softcap.
NO_WINDOW = (-1, -1)


def check_window(window_size: Any) -> Tuple[int, int]:
    """(left, right) from flash-attn's ``window_size``; -1 leaves a side unbounded."""
    if window_size is None:
        return NO_WINDOW
    try:
        left, right = window_size
    except (TypeError, ValueError):
        raise PasaError(f"window_size: expected a pair (left, right), got {window_size!r}") from None
    for side in (left, right):
        if isinstance(side, (bool, np.bool_)) or not isinstance(side, numbers.Integral) or side < -1:
            raise PasaError(f"window_size: {window_size!r} must hold integers >= -1 (-1 = unbounded)")
        if side > _INT32_MAX:
            raise PasaError(f"window_size: {int(side)} is outside -1..{_INT32_MAX}")
    return int(left), int(right)


def check_softcap(softcap: Any) -> float:
    """The logit softcap; 0 (or None) for none."""
    if softcap is None:
        return 0.0
    if isinstance(softcap, (bool, np.bool_)) or not isinstance(softcap, numbers.Real):
        raise PasaError(f"softcap: expected a number, got {type(softcap).__name__}")
    value = real_argument(softcap, "softcap")
    if not value >= 0.0:
        raise PasaError(f"softcap: {softcap} must be finite and >= 0 (0 = no softcap)")
    return value


def mask_shape(q_shape: Tuple[int, ...], k_shape: Tuple[int, ...], layout: str) -> Tuple[int, ...]:
    """[B, H_q, S_q, S_kv]: what a mask broadcasts to (always in this order, as in torch SDPA)."""
    for name, shape in (("q", q_shape), ("k", k_shape)):
        check_rank4(shape, name, layout)  # (before anything indexes the shape)
    if layout == "bshd":
        return (q_shape[0], q_shape[2], q_shape[1], k_shape[1])
    return (q_shape[0], q_shape[1], q_shape[2], k_shape[2])


def broadcast_shape(mask_dims: Tuple[int, ...], target: Tuple[int, ...],
                    surely: Callable[[Any], bool] = bool) -> Tuple[int, ...]:
    """The 4-D shape a mask of ``mask_dims`` is given: B and H stay 1 where the mask has 1 (the
    extension broadcasts them), S_q and S_kv are expanded. Raises PasaError if it cannot broadcast.
    ``surely`` decides each size comparison (a traced call's sizes may be symbolic: _torch's)."""
    if not 1 <= len(mask_dims) <= 4:
        raise PasaError(f"attn_mask: expected 1 to 4 dimensions, got shape {tuple(mask_dims)}")
    dims = (1,) * (4 - len(mask_dims)) + tuple(mask_dims)
    if any(surely(d != 1) and surely(d != t) for d, t in zip(dims, target)):
        raise PasaError(f"attn_mask: shape {tuple(mask_dims)} does not broadcast to [B, H_q, S_q, "
                        f"S_kv] = {list(target)}")
    return (dims[0], dims[1], target[2], target[3])


def unsupported_mask_dtype(dtype: Any) -> PasaError:
    """The error for a host mask of a dtype that is neither bool nor a float."""
    return PasaError(f"attn_mask: unsupported dtype {dtype} (bool, or a float dtype for an additive mask)")


def numpy_mask(mask: Any, target: Tuple[int, ...]) -> Tuple[Optional[np.ndarray], str]:
    """(array, kind) for a host mask: bool (True takes part) or float; kind is "boolean",
    "additive" or "none"."""
    if mask is None:
        return None, "none"
    if not isinstance(mask, np.ndarray):
        raise PasaError(f"attn_mask: expected a NumPy array like q, got {type(mask).__name__}")
    if isinstance(mask, np.ma.MaskedArray):  # (its data would be read whole, its own mask ignored)
        raise PasaError("attn_mask: a NumPy masked array, whose mask pasa would ignore; pass a plain array: "
                        "bool with True where a key takes part (e.g. ~m.mask), or m.filled(value)")
    check_whole_strides(mask, "attn_mask")
    shape = broadcast_shape(mask.shape, target)
    if mask.dtype == np.bool_:
        return np.broadcast_to(mask.reshape(_dims4(mask.shape)), shape).view(np.uint8), "boolean"
    if mask.dtype.kind == "f" and not mask.dtype.isnative:  # the same values in the machine's order
        mask = mask.astype(mask.dtype.newbyteorder("="))
    if mask.dtype.kind == "f" and mask.dtype.itemsize > 4:  # float64, longdouble
        finite = np.isfinite(mask)
        mask = np.where(finite, np.clip(mask, -FLOAT32_MAX, FLOAT32_MAX), mask).astype(np.float32)
    elif mask.dtype.kind != "f" and mask.dtype.name != "bfloat16":
        raise unsupported_mask_dtype(mask.dtype)
    if mask.dtype.name == "bfloat16":
        mask = mask.astype(np.float32)  # exact
    return np.broadcast_to(mask.reshape(_dims4(mask.shape)), shape), "additive"


def _dims4(shape: Tuple[int, ...]) -> Tuple[int, ...]:
    return (1,) * (4 - len(shape)) + tuple(shape)
