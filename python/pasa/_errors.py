# SPDX-License-Identifier: Apache-2.0
"""The exception every pasa entry point raises for bad input, and the argument checks that raise it."""

from __future__ import annotations

import numbers
import sys
from typing import Any

import numpy as np

from . import _core

#: Raised for bad input (shapes, dtypes, devices, files, policy text) and unsupported requests.
#: A subclass of :class:`ValueError`; the message names the offending argument or file.
PasaError = _core.PasaError
PasaError.__module__ = "pasa"
PasaError.__doc__ = (
    "Bad input or an unsupported request. A ValueError whose message names the argument or file "
    "and says what is wrong."
)

__all__ = ["PasaError"]

#: attention's operand names, and torch's scaled_dot_product_attention's for the same operands.
SDPA_ARGUMENT_NAMES = {"q": "query", "k": "key", "v": "value"}


def real_argument(value: Any, name: str) -> float:
    """``value`` as a finite float, or PasaError naming ``name`` (never TypeError/OverflowError)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise PasaError(f"{name}: expected a number, got {type(value).__name__}")
    try:
        result = float(value)
    except OverflowError:
        raise PasaError(f"{name}: the integer is too large for a float (beyond 1.8e308)") from None
    # (a comparison, not math.isfinite, which torch.compile cannot trace on a symbolic float; NaN
    # compares false)
    if not abs(result) <= sys.float_info.max:
        raise PasaError(f"{name}: {result} is not finite")
    return result


def int_argument(value: Any, name: str, low: int, high: int) -> int:
    """``value`` as an int in [low, high], or PasaError naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise PasaError(f"{name}: expected an integer, got {type(value).__name__}")
    if not low <= int(value) <= high:
        raise PasaError(f"{name}: {int(value)} is outside {low}..{high}")
    return int(value)


def flag_argument(value: Any, name: str) -> bool:
    """``value`` as a bool (a NumPy bool too), or PasaError naming ``name``: "False" is truthy, so a
    flag taken by its truth would read it as True."""
    if not isinstance(value, (bool, np.bool_)):
        raise PasaError(f"{name}: expected True or False, got {value!r}")
    return bool(value)


def alignment_argument(value: Any, name: str = "causal_alignment") -> str:
    """``value`` as one of the two causal alignments, or PasaError naming ``name``."""
    if not isinstance(value, str) or value not in ("bottom_right", "top_left"):
        raise PasaError(f"{name}: {value!r} is not 'bottom_right' (query i sees keys up to "
                        f"i + S_kv - S_q) or 'top_left' (keys up to i, torch's is_causal)")
    return value


def text_argument(value: str, name: str) -> str:
    """``value`` (a str) as the C++ side takes it, UTF-8, or PasaError naming ``name`` (a lone
    surrogate, from a file name or os.fsdecode, has no UTF-8)."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as error:
        raise PasaError(f"{name}: {value!r} is not valid text ({error.reason} at {error.start})") from None
    return value


def allocation_error(error: RuntimeError, name: str, shape: Any) -> BaseException:
    """What to raise for ``error`` from a torch allocation of output ``name``: a PasaError naming it
    where torch's CPU allocator ran out of memory (its bare RuntimeError says "can't allocate
    memory"), else ``error`` itself (a CUDA tensor's torch.OutOfMemoryError, what torch code expects)."""
    if "can't allocate memory" in str(error):
        return PasaError(f"{name}: cannot allocate an array of shape {tuple(shape)}: out of memory")
    return error
