# SPDX-License-Identifier: Apache-2.0
"""torch integration, in pure Python: the ``pasa::attention`` custom ops.

``torch.ops.pasa.attention`` is a functional op (new output) and ``torch.ops.pasa.attention_out``
writes into given tensors. Both have fake (meta) implementations, so ``torch.compile`` (also with
``fullgraph=True``) traces through them, and both allocate only through torch and launch on torch's
current stream, so CUDA graphs capture them. The extension links no torch: tensors reach it through
DLPack, so one build of pasa works with every torch version (2.4 or newer for ``torch.library``).

This module imports torch; ``import pasa`` imports it only when torch was already imported.
"""

from typing import Any, Dict, Optional, Tuple

import torch
import torch.autograd.forward_ad as _forward_ad
from torch import Tensor
from torch.utils.dlpack import to_dlpack as _to_dlpack

from . import _arrays, _core
from ._arrays import check_given_out, check_rank4, check_sign_bits, check_strided, new_torch_output
from ._errors import PasaError
from ._policy import core_policy
from ._score_mods import FLOAT32_MAX, broadcast_shape, mask_shape

__all__ = ["attention"]

_DTYPES = (torch.float32, torch.float16, torch.bfloat16)
_arrays._torch_module = torch


def _lse_shape(q: Tensor, layout: str) -> Tuple[int, int, int]:
    if layout == "bshd":
        return (q.shape[0], q.shape[2], q.shape[1])
    return (q.shape[0], q.shape[1], q.shape[2])


try:  # (a test on sizes: guarded where they are known or backed, False where a data-dependent one leaves it open)
    from torch.fx.experimental.symbolic_shapes import guard_or_false as _surely
except ImportError:  # older torch: its sizes are concrete or backed
    _surely = bool


def _check_traceable(q: Tensor, k: Tensor, v: Tensor, policy: str, layout: str,
                     attn_mask: Optional[Tensor] = None) -> None:
    """What can be checked from metadata alone, so that torch.compile reports it while tracing and a
    meta or fake call refuses what the call would (the core's checks, in its words)."""
    core_policy(policy)  # raises PasaError for bad policy text
    for name, x in (("q", q), ("k", k), ("v", v)):
        check_rank4(tuple(x.shape), name, layout)
        _check_dtype(x, name)
    # (Sizes stay symbolic under dynamic shapes, each test a guard rather than a specialization; one
    # that a data-dependent size leaves open is not raised here: the call checks it when it runs.)
    order = (0, 1, 2, 3) if layout == "bhsd" else (0, 2, 1, 3)
    (b, h_q, _, d), (b_k, h_kv, _, d_k), (b_v, *_) = ([x.shape[i] for i in order] for x in (q, k, v))
    for name, x in (("q", q), ("k", k), ("v", v)):
        for i, dim in zip(order, ("batch", "heads", "sequence", "head dim")):
            if _surely(x.shape[i] <= 0):
                raise PasaError(f"{name}: {dim} size is {x.shape[i]} (every dimension must be at least 1; "
                                f"zero-length sequences are not attention problems)")
    if _surely(b_k != b) or _surely(b_v != b):
        raise PasaError(f"k/v: batch sizes {b_k} and {b_v} differ from q's {b}")
    if _surely(d_k != d):
        raise PasaError(f"k: head dim {d_k} differs from q's {d}")
    if any(_surely(n_v != n_k) for n_v, n_k in zip(v.shape, k.shape)):
        raise PasaError(f"v: shape {list(v.shape)} differs from k's {list(k.shape)}")
    if _surely(h_q % h_kv != 0):
        raise PasaError(f"k: {h_kv} K/V heads do not divide the {h_q} query heads (GQA needs H_q to be a "
                        f"multiple of H_kv)")
    if attn_mask is not None:
        broadcast_shape(tuple(attn_mask.shape), mask_shape(tuple(q.shape), tuple(k.shape), layout), _surely)


def _check_one_device(q: Tensor, **others: Optional[Tensor]) -> None:
    """Every tensor on q's device. The fakes run for real calls too, whenever one argument is a meta
    tensor (the dispatcher then picks the Meta kernel): a meta mask or k beside CPU q would come back
    as uninitialized output."""
    for name, x in others.items():
        if x is not None and x.device != q.device:
            raise PasaError(f"{name}: on {x.device} but q is on {q.device} ({name} must be on q's device)")


def autocast_operands(*tensors: Any) -> Tuple[Any, ...]:
    """The operands as torch's scaled_dot_product_attention takes them under ``torch.autocast`` on
    their device: every floating-point one (q, k, v, a float mask) cast to the autocast dtype (SDPA
    runs in lower precision there); unchanged outside autocast. (pasa's op has no autocast rule of
    its own, so that the drop-in's result is torch's dtype.)"""
    device_type = tensors[0].device.type
    if not torch.is_autocast_enabled(device_type):
        return tensors
    dtype = torch.get_autocast_dtype(device_type)
    return tuple(x.to(dtype) if isinstance(x, torch.Tensor) and x.is_floating_point() else x for x in tensors)


def _check_dtype(x: Tensor, name: str) -> None:
    if x.dtype not in _DTYPES:
        raise PasaError(f"{name}: unsupported dtype {str(x.dtype).replace('torch.', '')} "
                        f"(pasa takes float32, float16 or bfloat16)")


def _mask_argument(q: Tensor, k: Tensor, layout: str,
                   attn_mask: Optional[Tensor]) -> Tuple[Optional[Tensor], str]:
    """(mask, kind) as the extension takes it: [B or 1, H_q or 1, S_q, S_kv], bool as bytes."""
    if attn_mask is None:
        return None, "none"
    shape = broadcast_shape(tuple(attn_mask.shape), mask_shape(tuple(q.shape), tuple(k.shape), layout))
    # (converted before it is expanded, so that a broadcast mask stays a stride-0 view of its own size)
    kind = "boolean" if attn_mask.dtype == torch.bool else "additive"
    if attn_mask.dtype == torch.bool:
        attn_mask = attn_mask.view(torch.uint8)
    elif attn_mask.dtype == torch.float64:  # (finite values past float32's range saturate: _score_mods)
        attn_mask = torch.where(torch.isfinite(attn_mask), attn_mask.clamp(-FLOAT32_MAX, FLOAT32_MAX),
                                attn_mask).to(torch.float32)
    return attn_mask.reshape((1,) * (4 - attn_mask.dim()) + tuple(attn_mask.shape)).expand(shape), kind


def _launch(q: Tensor, k: Tensor, v: Tensor, out: Tensor, lse: Optional[Tensor], policy: str,
            causal: bool, causal_alignment: str, scale: Optional[float], layout: str,
            attn_mask: Optional[Tensor] = None, window_left: int = -1, window_right: int = -1,
            softcap: float = 0.0) -> None:
    stream = 0
    if q.device.type == "cuda":
        # The kernels launch on the current device; torch's current stream of q's device (the
        # capturing stream inside torch.cuda.graph).
        if q.device.index is not None and q.device.index != _current_device():
            with torch.cuda.device(q.device):
                _launch(q, k, v, out, lse, policy, causal, causal_alignment, scale, layout,
                        attn_mask, window_left, window_right, softcap)
            return
        stream = _current_raw_stream(q.device.index)
    # (the ops' own run: direct calls of torch.ops.pasa reach it unchecked, and compiled calls too)
    for name, x in (("q", q), ("k", k), ("v", v), ("out", out), ("lse", lse), ("attn_mask", attn_mask)):
        if x is not None:
            check_sign_bits(x, name)
    mask, mask_kind = _mask_argument(q, k, layout, attn_mask)
    _core.attention(_capsule(q), _capsule(k), _capsule(v), _capsule(out),
                    None if lse is None else _capsule(lse), core_policy(policy), causal,
                    causal_alignment, scale, layout, stream, window_left=window_left,
                    window_right=window_right, softcap=softcap,
                    mask=None if mask is None else _capsule(mask), mask_kind=mask_kind)


# torch's own raw accessors of the current stream and device where it has them (what Triton calls; a
# Stream object costs ~10 us a call, torch.cuda.current_device() 0.3 us), looked up once.
_raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None)
_raw_device = getattr(torch._C, "_cuda_getDevice", None)


def _current_device() -> int:
    """torch's current CUDA device (only asked once a CUDA tensor exists, so CUDA is initialized)."""
    return _raw_device() if _raw_device is not None else torch.cuda.current_device()


def _current_raw_stream(device_index: Optional[int]) -> int:
    """The cudaStream_t of torch's current stream on the device (that of the current device for None)."""
    index = _current_device() if device_index is None else device_index
    return _raw_stream(index) if _raw_stream is not None else torch.cuda.current_stream(index).cuda_stream


def _capsule(t: Tensor) -> object:
    """A DLPack capsule of t, made without any stream synchronization.

    Handing the tensor itself to the extension would call ``t.__dlpack__()``, which in some torch
    versions makes the default stream wait on the current one (an event per tensor, and an error
    inside CUDA-graph capture). pasa works on the caller's current stream, so none is needed.
    detach(): pasa only reads q, k, v, and DLPack refuses tensors that require grad. The callers
    check for a lazy sign (check_sign_bits) first: DLPack would drop it.
    """
    return _to_dlpack(t.detach())


@torch.library.custom_op("pasa::attention", mutates_args=())
def _attention_op(q: Tensor, k: Tensor, v: Tensor, policy: str, causal: bool,
                  causal_alignment: str, scale: Optional[float], layout: str,
                  return_lse: bool, attn_mask: Optional[Tensor] = None, window_left: int = -1,
                  window_right: int = -1, softcap: float = 0.0) -> Tuple[Tensor, Tensor]:
    return _attention_new_outputs(q, k, v, policy, causal, causal_alignment, scale, layout, return_lse,
                                  attn_mask, window_left, window_right, softcap)


def _attention_new_outputs(q: Tensor, k: Tensor, v: Tensor, policy: str, causal: bool,
                           causal_alignment: str, scale: Optional[float], layout: str,
                           return_lse: bool, attn_mask: Optional[Tensor], window_left: int,
                           window_right: int, softcap: float,
                           placeholder_lse: bool = True) -> Tuple[Tensor, Optional[Tensor]]:
    """The output and the LSE (without return_lse: an empty placeholder, as the op must return a
    tensor, or None with placeholder_lse=False)."""
    out = new_torch_output(tuple(q.shape), q.dtype, q.device, "out")
    lse = None
    if return_lse or placeholder_lse:
        lse_shape = _lse_shape(q, layout) if return_lse else (0,)
        lse = new_torch_output(tuple(lse_shape), torch.float32, q.device, "lse")
    _launch(q, k, v, out, lse if return_lse else None, policy, causal, causal_alignment, scale,
            layout, attn_mask, window_left, window_right, softcap)
    return out, lse


# The plans of eager calls on CUDA tensors (pasa._core.PlannedAttention), by everything a plan depends
# on but the data: shapes, strides, dtypes and device indices of q, k, v (the outputs are new
# contiguous tensors, so q's shape and the layout fix theirs) and the options. A repeated call then
# costs a dictionary lookup, the allocations and the launch: no checks, no planning, no DLPack
# capsules. Cleared when full (plans are small host objects; a process meets few problems).
_plans: Dict[tuple, "_core.PlannedAttention"] = {}
_MAX_PLANS = 512


def _planned_attention(q: Tensor, k: Tensor, v: Tensor, policy: str, causal: bool,
                       causal_alignment: str, scale: Optional[float], layout: str, return_lse: bool,
                       window_left: int, window_right: int,
                       softcap: float) -> Tuple[Tensor, Optional[Tensor]]:
    """pasa.attention on plain eager CUDA tensors through a cached plan (new output and LSE)."""
    index = q.get_device()
    if index != _current_device():  # (the kernels launch on the current device)
        with torch.cuda.device(index):
            return _planned_attention(q, k, v, policy, causal, causal_alignment, scale, layout,
                                      return_lse, window_left, window_right, softcap)
    # (get_device(): an int, -1 for a CPU tensor, where .device makes a torch.device to hash)
    try:
        key = (q.shape, q.stride(), k.shape, k.stride(), v.shape, v.stride(), q.dtype, k.dtype, v.dtype,
               index, k.get_device(), v.get_device(), policy, causal, causal_alignment, scale, layout,
               return_lse, window_left, window_right, softcap)
    except RuntimeError:  # a sparse or nested tensor, which has no strides: say which
        _check_tensor_arguments(q, k, v, None, None)
        raise
    out = torch.empty_like(q, memory_format=torch.contiguous_format)
    lse = torch.empty(_lse_shape(q, layout), dtype=torch.float32, device=q.device) if return_lse else None
    plan = _plans.get(key)
    if plan is None:  # the first call of this problem: every check, with messages naming arguments
        _check_tensor_arguments(q, k, v, None, None)
        plan = _core.PlannedAttention(_capsule(q), _capsule(k), _capsule(v), _capsule(out),
                                      None if lse is None else _capsule(lse), core_policy(policy),
                                      causal, causal_alignment, scale, layout,
                                      window_left=window_left, window_right=window_right,
                                      softcap=softcap)
        if len(_plans) >= _MAX_PLANS:
            _plans.clear()
        _plans[key] = plan
    size = plan.workspace_bytes
    stream = _current_raw_stream(index)
    workspace = _workspace(index, stream, size) if size else None
    plan.run(q.data_ptr(), k.data_ptr(), v.data_ptr(), out.data_ptr(),
             0 if lse is None else lse.data_ptr(), 0 if workspace is None else workspace.data_ptr(),
             stream)
    return out, lse


# The workspaces of eager calls, one per (device, stream), grown to the largest size asked: the calls
# on one stream run one after another, so they can share one, and concurrent streams never do. A
# call inside CUDA-graph capture takes a new one from torch's allocator (the graph's private pool),
# so a captured graph, which may be replayed on any stream, keeps its own. Kept for the process's
# life (small: the split-KV decode's partials, or 256 bytes for an sm_90a prefill's tile counter).
_workspaces: Dict[Tuple[int, int], Tensor] = {}
_capturing = getattr(torch._C, "_cuda_isCurrentStreamCapturing", torch.cuda.is_current_stream_capturing)


def _workspace(device_index: int, stream: int, size: int) -> Tensor:
    if _capturing():
        return torch.empty(size, dtype=torch.uint8, device=torch.device("cuda", device_index))
    key = (device_index, stream)
    workspace = _workspaces.get(key)
    if workspace is None or workspace.numel() < size:
        workspace = torch.empty(size, dtype=torch.uint8, device=torch.device("cuda", device_index))
        _workspaces[key] = workspace
    return workspace


def _plain_eager(*tensors: Optional[Tensor]) -> bool:
    """Whether the custom op's dispatch can be skipped: plain tensors (no subclass such as a fake or
    functional tensor, no meta tensor: the op's fake gives those their outputs), none needing
    autograd, nothing being traced or compiled, no dispatch mode or transform active. The op's
    dispatch costs ~30 us a call; the result is the same either way."""
    for t in tensors:
        if t is not None and (type(t) is not Tensor or t.requires_grad or t.is_meta):
            return False
    return _untraced()


def _untraced() -> bool:
    """Nothing being traced or compiled (torch.jit.trace records only the ops it sees), no dispatch
    mode active, no torch.func transform and no forward-mode AD level (whose tensors would reach the
    kernels unwrapped, their batch dimension or tangent dropped)."""
    return (not torch.compiler.is_compiling() and not torch.jit.is_tracing() and not _dispatch_mode_active()
            and _functorch_level() is None and _forward_ad_level() < 0)


# The innermost active torch.func transform's level (None: none), and forward-mode AD's (-1: outside
# any dual_level). Both are torch internals read where torch has them (one call and one attribute
# read on every eager call); without them no transform is taken to be active.
_functorch_level = getattr(getattr(torch._C, "_functorch", None), "maybe_current_level", lambda: None)


def _forward_ad_level() -> int:
    return getattr(_forward_ad, "_current_level", -1)


def _check_tensor_arguments(q: Tensor, k: Tensor, v: Tensor, out: Optional[Tensor],
                            attn_mask: Optional[Tensor]) -> None:
    """What DLPack or the dispatcher would otherwise report obscurely or not at all: the kind of
    tensor, a lazy sign, q, k, v's dtypes, every tensor on q's device, autograd through out=, and
    torch.func's wrappers."""
    named = [("q", q), ("k", k), ("v", v)] + [(n, t) for n, t in (("out", out), ("attn_mask", attn_mask))
                                               if t is not None]
    for name, x in named:
        check_strided(x, name)
        if not torch.compiler.is_compiling():  # (Dynamo cannot trace is_neg; docs/python.md on compile)
            check_sign_bits(x, name)
        if _functorch_level() is not None and torch._C._functorch.is_functorch_wrapped_tensor(x):
            raise PasaError(f"{name}: a tensor of a torch.func transform (vmap, grad, jvp, ...); "
                            f"pasa.attention has no batching or differentiation rule for them")
        if _forward_ad_level() >= 0 and _forward_ad.unpack_dual(x).tangent is not None:
            raise PasaError(f"{name}: a dual tensor (forward-mode AD); pasa.attention has no forward derivative")
    for name, x in named[:3]:
        _check_dtype(x, name)
    _check_one_device(q, **dict(named[1:]))
    if out is not None:
        if torch.is_grad_enabled() and any(t.requires_grad for _, t in named):
            raise PasaError("out: pasa.attention with out= does not record autograd (an input or out "
                            "requires grad); call it under torch.no_grad(), or without out=")


try:
    from torch.utils._python_dispatch import _get_current_dispatch_mode
except ImportError:  # (a torch without it: always take the op)
    _get_current_dispatch_mode = None


def _dispatch_mode_active() -> bool:
    return _get_current_dispatch_mode is None or _get_current_dispatch_mode() is not None


@_attention_op.register_fake
def _attention_fake(q: Tensor, k: Tensor, v: Tensor, policy: str, causal: bool,
                    causal_alignment: str, scale: Optional[float], layout: str,
                    return_lse: bool, attn_mask: Optional[Tensor] = None, window_left: int = -1,
                    window_right: int = -1, softcap: float = 0.0) -> Tuple[Tensor, Tensor]:
    _check_traceable(q, k, v, policy, layout, attn_mask)
    _check_one_device(q, k=k, v=v, attn_mask=attn_mask)
    out = q.new_empty(q.shape)
    lse = q.new_empty(_lse_shape(q, layout) if return_lse else (0,), dtype=torch.float32)
    return out, lse


# pasa has no backward. The op still gets a derivative formula, whose gradients come from an op that
# raises when it runs: so that torch.compile can trace a forward whose inputs require grad (its
# backward graph is built while compiling, whether or not backward is ever called), and so that
# calling backward says why it fails. It keeps stand-ins of k and v (their shapes, dtypes and
# devices over one element each), not the tensors, so a graph kept alive holds no attention inputs.
@torch.library.custom_op("pasa::attention_backward", mutates_args=())
def _attention_backward_op(grad: Tensor, k_like: Tensor, v_like: Tensor) -> Tuple[Tensor, Tensor, Tensor]:
    raise PasaError("pasa.attention has no backward (inference only): run the forward under "
                    "torch.no_grad() or torch.inference_mode(), or detach its inputs")


@_attention_backward_op.register_fake
def _attention_backward_fake(grad: Tensor, k_like: Tensor, v_like: Tensor) -> Tuple[Tensor, Tensor, Tensor]:
    return torch.empty_like(grad), torch.empty_like(k_like), torch.empty_like(v_like)


def _stand_in(x: Tensor) -> Tensor:
    return x.new_empty((1,) * x.dim()).expand(x.shape)


def _attention_setup_context(ctx, inputs, output) -> None:
    ctx.save_for_backward(_stand_in(inputs[1]), _stand_in(inputs[2]))


def _attention_backward(ctx, grad_out: Tensor, grad_lse: Tensor):
    dq, dk, dv = torch.ops.pasa.attention_backward(grad_out, *ctx.saved_tensors)
    return (dq, dk, dv) + (None,) * 10  # (policy ... softcap: no gradients)


_attention_op.register_autograd(_attention_backward, setup_context=_attention_setup_context)


@torch.library.custom_op("pasa::attention_out", mutates_args=("out", "lse"))
def _attention_out_op(q: Tensor, k: Tensor, v: Tensor, out: Tensor, lse: Optional[Tensor],
                      policy: str, causal: bool, causal_alignment: str, scale: Optional[float],
                      layout: str, attn_mask: Optional[Tensor] = None, window_left: int = -1,
                      window_right: int = -1, softcap: float = 0.0) -> None:
    _launch(q, k, v, out, lse, policy, causal, causal_alignment, scale, layout, attn_mask,
            window_left, window_right, softcap)


@_attention_out_op.register_fake
def _attention_out_fake(q: Tensor, k: Tensor, v: Tensor, out: Tensor, lse: Optional[Tensor],
                        policy: str, causal: bool, causal_alignment: str, scale: Optional[float],
                        layout: str, attn_mask: Optional[Tensor] = None, window_left: int = -1,
                        window_right: int = -1, softcap: float = 0.0) -> None:
    _check_traceable(q, k, v, policy, layout, attn_mask)
    _check_one_device(q, k=k, v=v, out=out, lse=lse, attn_mask=attn_mask)


def attention(q: Tensor, k: Tensor, v: Tensor, *, policy: str, causal: bool,
              causal_alignment: str, scale: Optional[float], layout: str, return_lse: bool,
              out: Optional[Tensor], window_size: Tuple[int, int] = (-1, -1),
              softcap: float = 0.0, attn_mask: Optional[Tensor] = None):
    """pasa.attention for torch tensors (arguments already checked by pasa.attention)."""
    if (out is None and attn_mask is None and type(q) is Tensor and type(k) is Tensor and type(v) is Tensor
            and q.is_cuda and k.is_cuda and v.is_cuda  # (the plans' key holds device indices, not types)
            and not (q.requires_grad or k.requires_grad or v.requires_grad)
            and _untraced()  # (before is_neg, which torch.compile cannot trace: it returns a bool)
            and not (q.is_neg() or k.is_neg() or v.is_neg())):  # (refused by the checks below)
        o, lse = _planned_attention(q, k, v, policy, causal, causal_alignment, scale, layout,
                                    return_lse, window_size[0], window_size[1], softcap)
        return (o, lse) if return_lse else o
    # (q's kind is the call's, as it is the output's: the argument named is the one that differs from q)
    q_is_tensor = isinstance(q, torch.Tensor)
    for name, x in (("k", k), ("v", v)):
        if isinstance(x, torch.Tensor) != q_is_tensor:
            raise PasaError(f"{name}: expected a torch.Tensor like q, got {type(x).__name__}" if q_is_tensor else
                            f"{name}: a torch.Tensor, but q is of type {type(q).__name__}: give q, k and v "
                            f"of one kind")
    if attn_mask is not None and not isinstance(attn_mask, torch.Tensor):
        raise PasaError(f"attn_mask: expected a torch.Tensor like q, got {type(attn_mask).__name__}")
    if out is not None and not isinstance(out, torch.Tensor):
        raise PasaError(f"out: expected a torch.Tensor like q, got {type(out).__name__}")
    _check_tensor_arguments(q, k, v, out, attn_mask)
    mods = dict(attn_mask=attn_mask, window_left=window_size[0], window_right=window_size[1],
                softcap=softcap)
    if out is None:
        if _plain_eager(q, k, v, attn_mask):
            o, lse = _attention_new_outputs(q, k, v, policy, causal, causal_alignment, scale, layout,
                                            return_lse, attn_mask, window_size[0], window_size[1],
                                            softcap, placeholder_lse=False)
        else:
            o, lse = torch.ops.pasa.attention(q, k, v, policy, causal, causal_alignment, scale,
                                              layout, return_lse, **mods)
        return (o, lse) if return_lse else o
    check_given_out(out, tuple(q.shape))
    lse = new_torch_output(tuple(_lse_shape(q, layout)), torch.float32, q.device, "lse") if return_lse else None
    torch.ops.pasa.attention_out(q, k, v, out, lse, policy, causal, causal_alignment, scale, layout,
                                 **mods)
    return (out, lse) if return_lse else out
