# SPDX-License-Identifier: Apache-2.0
"""Falling back to torch: what routes a model's attention calls (``pasa.patch``, the transformers
backend) does with a call pasa cannot run. It runs torch's own SDPA instead, warns once per reason
(a :class:`PasaFallbackWarning`) and counts it; ``pasa.stats()`` reports the counts. With
``strict=True`` the call raises :class:`PasaError` instead.
"""

from __future__ import annotations

import os
import re
import sys
import threading
import warnings
from typing import Any, Callable, Dict, Optional, Tuple, TypeVar

from ._errors import SDPA_ARGUMENT_NAMES, PasaError

__all__ = ["PasaFallbackWarning", "stats", "run_or_fallback", "sdpa_precheck", "warm_score_mods",
           "score_mods_refusal"]

T = TypeVar("T")


class PasaFallbackWarning(UserWarning):
    """A model's attention call went to torch's SDPA because pasa cannot run it (warned once per
    reason; ``pasa.stats()`` counts every one)."""


_lock = threading.Lock()
_calls = 0
_reasons: Dict[str, int] = {}
_warned: set = set()


def stats(reset: bool = False) -> Dict[str, Any]:
    """Counts of routed attention calls since the start (or the last ``reset=True``):
    ``{"calls": run by pasa, "fallbacks": sent to torch, "reasons": {reason: count}}``."""
    global _calls
    if not isinstance(reset, bool):
        raise PasaError(f"reset: expected True or False, got {reset!r}")
    with _lock:
        result = {"calls": _calls, "fallbacks": sum(_reasons.values()), "reasons": dict(_reasons)}
        if reset:
            _calls = 0
            _reasons.clear()
            _warned.clear()
    return result


def compiling() -> bool:
    """Whether torch.compile is tracing the call. Routed calls then keep no counts: Dynamo cannot
    enter a lock or trace warnings.warn, and it would replay a counter's update as a store of the
    value it traced, guarded on that value, so every call would recompile."""
    import torch  # (routed calls are torch calls: it is imported already)

    return torch.compiler.is_compiling()


def _record_call() -> None:
    global _calls
    if compiling():
        return
    with _lock:
        _calls += 1


_NUMBERS = re.compile(r"[-+]?(?:\d+\.?\d*|\.\d+)(?:e[-+]?\d+)?|\b(?:nan|inf)\b")


def _record_fallback(reason: str, detail: str) -> None:
    if compiling():
        return
    # Warned once per cause: the detail without its numbers (a second cause for the same argument,
    # another shape or stride say, is told too; the same cause at other values is not).
    cause = _NUMBERS.sub("#", detail)
    with _lock:
        _reasons[reason] = _reasons.get(reason, 0) + 1
        first = cause not in _warned
        _warned.add(cause)
    if first:
        warnings.warn(f"pasa: falling back to torch's scaled_dot_product_attention ({detail}); "
                      f"further calls for this cause fall back silently, pasa.stats() counts them",
                      PasaFallbackWarning, stacklevel=_caller_stacklevel())


def _caller_stacklevel() -> int:
    """The stacklevel, for a warning issued by this function's caller, of the innermost frame
    outside the pasa package: the model code whose attention call fell back, however many of
    pasa's layers (patch router, integration, fallback) lie between."""
    package = os.path.dirname(os.path.abspath(__file__))
    frame, level = sys._getframe(1), 1
    while frame is not None and os.path.abspath(frame.f_code.co_filename).startswith(package + os.sep):
        frame, level = frame.f_back, level + 1
    return level


_SHORT_NAMES = {long: short for short, long in SDPA_ARGUMENT_NAMES.items()}


def _reason_of(error: PasaError) -> str:
    """A stable key for an error: the argument it names (the text before the first colon), as the
    prechecks name it (q, not sdpa's query)."""
    text = str(error)
    name = text.split(":", 1)[0].strip() if ":" in text else text
    return "/".join(_SHORT_NAMES.get(n, n) for n in name.split("/"))


def run_or_fallback(run: Callable[[], T], fallback: Callable[[], T], precheck: Optional[str],
                    strict: bool) -> T:
    """``run()`` through pasa, or ``fallback()`` (torch) when ``precheck`` names a reason pasa
    cannot run the call or ``run()`` raises PasaError (pasa checks everything before it computes or
    writes anything, so nothing is half done). ``strict``: raise instead of falling back."""
    reason, detail = (None, None) if precheck is None else (precheck.split(":", 1)[0], precheck)
    if reason is None:
        try:
            result = run()
        except PasaError as error:
            if strict:
                raise
            reason, detail = _reason_of(error), str(error)
        else:
            _record_call()
            return result
    if strict:
        raise PasaError(f"{detail} (strict=True: pasa does not fall back to torch)")
    assert reason is not None and detail is not None
    _record_fallback(reason, detail)
    return fallback()


_FLOAT32_MAX = 3.4028234663852886e38


def sdpa_precheck(query: Any, key: Any, value: Any, attn_mask: Any, dropout_p: Any,
                  enable_gqa: Any, scale: Any = None) -> Optional[str]:
    """Why pasa cannot run this scaled_dot_product_attention call, from metadata alone (None when
    it may: everything else is found by pasa's own checks)."""
    import torch

    tensors = (query, key, value)
    if not all(isinstance(t, torch.Tensor) for t in tensors):
        return "query/key/value: not torch tensors"
    # (before any shape is read: a nested tensor has none)
    if any(t.is_nested or t.layout != torch.strided for t in tensors):
        return "layout: nested or sparse tensors (pasa takes strided ones)"
    if any(t.dtype not in (torch.float32, torch.float16, torch.bfloat16) for t in tensors):
        return f"dtype: {query.dtype} (pasa takes float32, float16 and bfloat16)"
    # (dtypes torch's SDPA refuses, and pasa would take: torch raises its own error)
    if len({t.dtype for t in tensors}) != 1:
        return "dtype: query, key and value differ (torch's SDPA takes one dtype)"
    if (isinstance(attn_mask, torch.Tensor) and attn_mask.dtype not in (torch.bool, torch.float32, query.dtype)):
        return f"attn_mask: dtype {attn_mask.dtype} is neither bool, float32 nor the query's (torch's SDPA refuses it)"
    if not all(t.dim() in (3, 4) for t in tensors) or len({t.dim() for t in tensors}) != 1:
        return "rank: pasa takes [N, H, L, E] or [N, L, E] operands"
    # What pasa's own checks refuse and the metadata tells too: told here, so that a call under
    # torch.compile (whose traced op runs those checks only when the graph runs) falls back as an
    # eager one does.
    for name, t in zip("qkv", tensors):
        if any(n == 0 for n in t.shape):
            return f"{name}: shape {tuple(t.shape)} has a size 0"
        if t.shape[-1] > 1 and t.stride(-1) != 1:
            return f"{name}: the head dim is not contiguous (stride {t.stride(-1)})"
    # (a comparison, not math.isfinite, which torch.compile cannot trace on a symbolic float; NaN
    # compares false)
    if isinstance(scale, (int, float)) and not abs(scale) <= _FLOAT32_MAX:
        return f"scale: {scale} is not a finite float32"
    if dropout_p != 0.0:
        return "dropout_p: pasa has no dropout"
    # (a mask that requires grad too: a learned additive bias, ALiBi-style)
    if torch.is_grad_enabled() and any(isinstance(t, torch.Tensor) and t.requires_grad
                                       for t in (*tensors, attn_mask)):
        return "autograd: pasa has no backward"
    if attn_mask is not None and attn_mask.device != query.device:
        return "attn_mask: on another device than the query"
    # (the heads are dim -3: of [N, H, L, E], and of [H, L, E], as torch's GQA reads 3-D operands)
    if query.shape[-3] != key.shape[-3] and not enable_gqa:
        return "enable_gqa: head counts differ without enable_gqa=True"
    if key.shape[-3] > 0 and query.shape[-3] % key.shape[-3] != 0:
        return "heads: H_q is not a multiple of H_kv"
    # Shapes torch broadcasts or allows and pasa does not: told here, from metadata, so that a call
    # under torch.compile falls back too (its fake output has q's shape).
    for name, t in (("k", key), ("v", value)):
        if t.shape[-1] != query.shape[-1]:
            return f"{name}: head dim {t.shape[-1]} differs from q's {query.shape[-1]}"
    if key.shape[:-1] != value.shape[:-1]:
        return f"v: shape {tuple(value.shape)} differs from k's {tuple(key.shape)} but for the head dim"
    if query.dim() == 4 and query.shape[0] != key.shape[0]:
        return f"k: batch {key.shape[0]} differs from q's {query.shape[0]} (pasa does not broadcast it)"
    return None


# Whether the GPU kernels take an attention mask, a window or a softcap under a policy, per (policy
# text, torch dtype). Filled where a policy is chosen (warm_score_mods: the answer is native code,
# which torch.compile cannot trace) and read inside traced calls (score_mods_refusal).
_gpu_score_mods: Dict[Tuple[str, Any], bool] = {}


def warm_score_mods(policy: str) -> None:
    """Records, for ``policy`` (text) and the kernels' 16-bit input dtypes, whether the GPU kernels
    take score modifiers. Call it outside traced code; a build without CUDA records nothing."""
    import torch

    from . import _core
    from ._policy import core_policy

    if not _core.built_with_cuda:
        return
    for dtype, name in ((torch.float16, "float16"), (torch.bfloat16, "bfloat16")):
        if (policy, dtype) not in _gpu_score_mods:
            _gpu_score_mods[(policy, dtype)] = bool(_core.cuda_runs_score_mods(core_policy(policy), name))


def score_mods_refusal(policy: str, query: Any, given: Optional[str]) -> Optional[str]:
    """Why a call on query's GPU that ``given`` an attention mask, window or softcap (its argument's
    name; None: none) cannot run under ``policy``: only the exact policy's GPU kernels take them. A
    precheck from metadata, so that a call under torch.compile falls back as an eager one does (whose
    planning refuses it); None where unknown (not warmed: the planning still refuses it)."""
    if given is None or not query.is_cuda or _gpu_score_mods.get((policy, query.dtype), True):
        return None
    return (f"{given}: the GPU kernels of policy '{policy}' take no attention mask, sliding window or softcap "
            f"(the exact policy's do)")
