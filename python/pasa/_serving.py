# SPDX-License-Identifier: Apache-2.0
"""The serving layouts with flash-attn's names: packed variable-length batches (``cu_seqlens``) and
paged or dense KV caches (``block_table``, ``cache_seqlens``).

Each sequence's result is what :func:`pasa.attention` gives on that sequence alone. Host arrays run on
the CPU emulator; torch CUDA tensors on the GPU, on torch's current stream of q's device, with the
index arrays on that device too (``pasa/serving.h`` says what runs there).
"""

from __future__ import annotations

import numbers
from typing import Any, Callable, Optional, Tuple, Union

import numpy as np

from . import _core
from ._arrays import (_DL_CPU, _imported_torch, check_array, check_given_out, check_sign_bits, check_strided,
                      check_torch_out_beside_torch_q, check_writable, dlpack_device, is_dense_tensor,
                      is_ml_dtypes_bfloat16, is_torch_tensor, new_host_output, new_torch_output)
from ._errors import PasaError, alignment_argument, flag_argument, real_argument
from ._policy import PolicyLike, core_policy

__all__ = ["attention_varlen", "attention_with_kvcache"]


def _where(x: Any) -> str:
    """The device an array lives on, as the messages name it."""
    if is_torch_tensor(x):
        return str(x.device)
    kind, index = dlpack_device(x)
    return "cpu" if kind == _DL_CPU else f"DLPack device type {kind} (index {index})"


def _cuda_device(q: Any) -> Optional[Any]:
    """q's torch.device when q is a torch CUDA tensor, None when q is a host array."""
    if is_torch_tensor(q) and q.device.type == "cuda":
        return q.device
    check_array(q, "q")
    if dlpack_device(q)[0] != _DL_CPU:
        raise PasaError(f"q: on {_where(q)}; the varlen and KV-cache layouts take host arrays (CPU "
                        f"emulator) or torch CUDA tensors")
    return None


def _mixed(name: str, x: Any, device: Any) -> PasaError:
    return PasaError(f"{name}: on {_where(x)} but q is on {device or 'cpu'} (all arrays, the index "
                     f"arrays too, must be on q's device)")


def _check_no_grad(x: Any, name: str) -> None:
    """PasaError for a torch tensor that requires grad where autograd records: these calls write
    their outputs (and the caches) directly, so nothing would carry a gradient back."""
    if is_torch_tensor(x) and x.requires_grad and _imported_torch().is_grad_enabled():
        raise PasaError(f"{name}: requires grad; packed and KV-cache calls record no autograd (inference "
                        f"only): call them under torch.no_grad() or torch.inference_mode()")


def _host(x: Any, name: str, index: bool = False) -> Any:
    """x, checked to be a host array (NumPy, torch CPU tensor, any DLPack host array; an index array:
    check_array)."""
    check_array(x, name, index=index)
    if is_ml_dtypes_bfloat16(x):  # (no DLPack for them; the caches are written in place, so no copy)
        raise PasaError(f"{name}: NumPy arrays of ml_dtypes' bfloat16 are taken by the dense "
                        "pasa.attention only; give packed and KV-cache calls float32 (x.astype(np.float32) "
                        "is exact) or torch bfloat16 tensors")
    if dlpack_device(x)[0] != _DL_CPU:
        raise _mixed(name, x, None)
    _check_no_grad(x, name)
    return x.detach() if is_torch_tensor(x) else x


def _on_device(x: Any, name: str, device: Any) -> Any:
    """x, checked to be a torch tensor on q's CUDA device."""
    if not (is_torch_tensor(x) and x.device == device):
        raise _mixed(name, x, device)
    check_strided(x, name)
    check_sign_bits(x, name)
    _check_no_grad(x, name)
    return x


def _placer(device: Optional[Any]) -> Callable[[Any, str], Any]:
    """The check each array of a call goes through: on the host, or on q's CUDA device."""
    if device is None:
        return _host
    return lambda x, name: _on_device(x, name, device)


def _int32(x: Any, name: str) -> np.ndarray:
    """A host int32 array of integers (what cu_seqlens, cache_seqlens and block_table hold)."""
    if hasattr(x, "__dlpack_device__"):  # an array: it must be on the host, like q
        _host(x, name, index=True)
    if is_torch_tensor(x):
        x = x.detach().numpy()
    try:
        array = np.asarray(x)
    except (ValueError, TypeError) as e:  # ragged nesting: [0, [4]]
        raise PasaError(f"{name}: expected an array of integers, got a {type(x).__name__} that NumPy "
                        f"cannot make one array of ({e})") from None
    if not hasattr(x, "dtype") and array.size == 0:
        array = array.astype(np.int32)  # (NumPy makes an empty list float64: it holds no non-integer)
    if array.dtype == object and all(_is_int(value) for value in array.flat):
        # Python ints past int64 (NumPy keeps them as objects): compared exactly.
        if any(not -2**31 <= value < 2**31 for value in array.flat):
            raise PasaError(f"{name}: values do not fit in int32")
        array = array.astype(np.int64)
    if array.dtype.kind not in "iu":
        raise PasaError(f"{name}: expected integers, got dtype {array.dtype}")
    if array.ndim == 0:
        raise _zero_d(name)
    if array.size and (array.min() < np.iinfo(np.int32).min or array.max() > np.iinfo(np.int32).max):
        raise PasaError(f"{name}: values do not fit in int32")
    try:
        return np.ascontiguousarray(array, dtype=np.int32)
    except MemoryError:  # (a broadcast view of a huge table: the copy is whole)
        raise PasaError(f"{name}: its int32 copy ({array.size * 4} bytes) does not fit in memory") from None


def _columns_read(table: Any, seqlens: np.ndarray, k: Any, k_cache: Any) -> Any:
    """A host block table cut to the columns the call reads, the longest sequence's blocks (at least
    one column; a table too short keeps its own, which the call then names): a broadcast table of
    millions of columns is copied whole otherwise. Anything but a 2-D array goes as it is."""
    shape = getattr(table, "shape", None)
    if shape is None or len(shape) != 2 or len(getattr(k_cache, "shape", ())) != 4 or not seqlens.size:
        return table
    appended = k is not None and len(getattr(k, "shape", ())) == 4  # (another rank: the call names it)
    block_size, s_new = int(k_cache.shape[1]), int(k.shape[1]) if appended else 0
    if block_size < 1:
        return table
    longest = max(int(seqlens.max()) + s_new, 0)
    needed = max(-(-longest // block_size), 1)
    return table[:, :needed] if needed < int(shape[1]) else table


def _byte_span(x: Any) -> Optional[Tuple[Any, int, int]]:
    """(device, first byte, one past the last) that the array x's elements span, or None (no
    elements, or not an array)."""
    if isinstance(x, np.ndarray):
        device, address, size = "cpu", x.__array_interface__["data"][0], x.itemsize
        strides = [st // size for st in x.strides] if size else []
    elif is_dense_tensor(x) and x.device.type != "meta":
        device, address, size, strides = str(x.device), x.data_ptr(), x.element_size(), list(x.stride())
    else:
        return None
    if any(n == 0 for n in x.shape):
        return None
    low = sum(min(0, (n - 1) * st) for n, st in zip(x.shape, strides))
    high = sum(max(0, (n - 1) * st) for n, st in zip(x.shape, strides))
    return device, address + low * size, address + (high + 1) * size


def _refuse_written_indices(indices: Tuple[Tuple[str, Any], ...], written: Tuple[Tuple[str, Any], ...]) -> None:
    """PasaError where an index array as the caller gave it (cu_seqlens, cache_seqlens, block_table)
    shares memory with an array the call writes: the C++ call's own check sees only the int32 copy
    made of an index array of another dtype or layout, and the write would change the caller's."""
    for name, x in indices:
        span = _byte_span(x)
        for written_name, w in written:
            other = None if span is None else _byte_span(w)
            if other is not None and span[0] == other[0] and span[1] < other[2] and other[1] < span[2]:
                raise PasaError(f"{written_name}: its memory overlaps {name}'s; pass an output that does not "
                                f"alias the inputs or the other outputs (the byte ranges the views span must be "
                                f"disjoint)")


def _zero_d(name: str) -> PasaError:
    hint = " (or a Python int: the same length for every sequence)" if name == "cache_seqlens" else ""
    return PasaError(f"{name}: a 0-d array, where an array over the sequences is expected{hint}")


def _device_int32(x: Any, name: str, device: Any) -> Any:
    """An int32 tensor on q's device. An integer tensor there is converted on the device; outside
    CUDA-graph capture its values are first checked to fit in int32 (inside, nothing is read on the
    host; negative values are the C++ API's to reject, where it copies the index arrays to check
    them)."""
    import torch

    x = _on_device(x, name, device)
    if x.dim() == 0:
        raise _zero_d(name)
    if x.dtype.is_floating_point or x.dtype.is_complex or x.dtype == torch.bool:
        raise PasaError(f"{name}: expected integers, got dtype {str(x.dtype).replace('torch.', '')}")
    if x.dtype != torch.int32 and x.numel() and not torch.cuda.is_current_stream_capturing():
        # (an eager call waits for the stream anyway, to check the values: so can this)
        low, high = (int(t) for t in torch.aminmax(x))
        if low < -2**31 or high >= 2**31:
            raise PasaError(f"{name}: values do not fit in int32")
    return x.to(torch.int32).contiguous()


def _is_int(value: Any) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, (bool, np.bool_))


def _new_output(x: Any, shape: Tuple[int, ...], name: str, fill: Optional[float] = None,
                dtype: Any = None) -> Any:
    """A new array of x's kind (torch, on x's device, or NumPy; x's dtype, or float32 with a dtype),
    filled with ``fill`` where given; running out of host memory is a PasaError naming the output."""
    if not is_torch_tensor(x):
        return new_host_output(shape, x.dtype if dtype is None else dtype, name, 0.0 if fill is None else fill)
    import torch

    return new_torch_output(shape, x.dtype if dtype is None else torch.float32, x.device, name, fill)


def _count_writes(written: Tuple[Any, ...]) -> None:
    """Bumps the version counter of each torch tensor in ``written``, which the call wrote through
    DLPack where torch does not see it, as torch's own in-place writes do: autograd then refuses a
    graph that saved the old contents. (An inference tensor keeps no counter.)"""
    for x in written:
        if is_torch_tensor(x) and not x.is_inference():
            import torch

            torch.autograd.graph.increment_version(x)


def _run(function: Callable[..., None], device: Optional[Any], arrays: Tuple[Any, ...],
         options: Tuple[Any, ...], written: Tuple[Any, ...], captured_workspace: bool = False) -> None:
    """function(*arrays, *options, stream): on the host with stream 0, or on q's CUDA device (the
    kernels launch on the current device) with torch's current stream of that device (the capturing
    one inside torch.cuda.graph), the tensors handed over as DLPack capsules made without stream
    synchronization (pasa._torch says why); then the version counters of ``written`` (the arrays the
    call writes) are bumped, also when the call raises (stopped by Ctrl-C, it may have written some).
    captured_workspace: inside CUDA-graph capture, function also takes workspace=(bytes -> pointer),
    served from torch's allocator (the graph's pool), so that the graph holds no allocation nodes of
    its own."""
    try:
        _launch(function, device, arrays, options, captured_workspace)
    finally:
        _count_writes(written)


def _launch(function: Callable[..., None], device: Optional[Any], arrays: Tuple[Any, ...],
            options: Tuple[Any, ...], captured_workspace: bool) -> None:
    """_run's call of function, on the host or on q's CUDA device."""
    if device is None:
        function(*arrays, *options, 0)
        return
    import torch

    from . import _torch

    if device.index != _torch._current_device():
        with torch.cuda.device(device):
            _launch(function, device, arrays, options, captured_workspace)
        return
    capsules = tuple(None if a is None else _torch._capsule(a) for a in arrays)
    stream = _torch._current_raw_stream(device.index)
    if not (captured_workspace and _torch._capturing()):
        function(*capsules, *options, stream)
        return
    held = []  # the workspace tensor, alive until the kernels that use it are captured

    def workspace(size: int) -> int:
        held.append(_torch._workspace(device.index, stream, size))
        return held[-1].data_ptr()

    function(*capsules, *options, stream, workspace=workspace)


def _check_scale(scale: Any, name: str) -> Optional[float]:
    """None, or scale as a finite float (PasaError naming ``name`` otherwise)."""
    return None if scale is None else real_argument(scale, name)


def attention_varlen(q: Any, k: Any, v: Any, *, cu_seqlens_q: Any, cu_seqlens_k: Any,
                     max_seqlen_q: int, max_seqlen_k: int, policy: PolicyLike, causal: bool,
                     causal_alignment: str, scale: Optional[float], return_lse: bool,
                     out: Optional[Any]) -> Union[Any, Tuple[Any, Any]]:
    """pasa.attention's packed path (its docstring describes the arguments)."""
    for name, value in (("max_seqlen_q", max_seqlen_q), ("max_seqlen_k", max_seqlen_k)):
        if not _is_int(value):
            raise PasaError(f"{name}: expected an int, got {value!r}")
        if not 0 <= value <= 2**31 - 1:
            raise PasaError(f"{name}: {int(value)} is outside 0..{2**31 - 1}")
    check_torch_out_beside_torch_q(out, q)
    _refuse_written_indices((("cu_seqlens_q", cu_seqlens_q), ("cu_seqlens_k", cu_seqlens_k)), (("out", out),))
    device = _cuda_device(q)
    place = _placer(device)
    q, k, v = (place(x, name) for name, x in (("q", q), ("k", k), ("v", v)))
    if len(q.shape) != 3:
        raise PasaError(f"q: with cu_seqlens_q, expected a 3-D packed array [total_q, H_q, D], got "
                        f"shape {tuple(q.shape)}")
    total_q, heads_q = int(q.shape[0]), int(q.shape[1])
    given_out = out  # returned as given (place() may make a detached view of it)
    if out is None:  # zeros: the tokens outside [cu_seqlens_q[0], cu_seqlens_q[B]) are not written
        out = _new_output(q, tuple(int(n) for n in q.shape), "out", fill=0.0)
    else:
        out = place(out, "out")
        check_given_out(out, tuple(q.shape))
    if device is None:
        cu_q, cu_k = _int32(cu_seqlens_q, "cu_seqlens_q"), _int32(cu_seqlens_k, "cu_seqlens_k")
    else:
        cu_q = _device_int32(cu_seqlens_q, "cu_seqlens_q", device)
        cu_k = _device_int32(cu_seqlens_k, "cu_seqlens_k", device)
    lse = _new_output(q, (heads_q, total_q), "lse", fill=-np.inf, dtype=np.float32) if return_lse else None
    _run(_core.attention_varlen, device, (q, k, v, out, lse, cu_q, cu_k),
         (int(max_seqlen_q), int(max_seqlen_k), core_policy(policy), causal, causal_alignment, scale),
         written=(out,))
    result = out if given_out is None else given_out
    return (result, lse) if return_lse else result


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

    Host arrays (NumPy, torch CPU tensors) run on the CPU emulator, every policy. torch CUDA tensors
    run on the GPU, on torch's current stream of ``q``'s device: a kernel appends ``k``, ``v``, then
    the split-KV decode kernel reads the cache in place, each sequence to its own length. There
    ``S_q <= 16`` and the policy is ``exact`` or ``fdpp``; every array (``cache_seqlens`` and
    ``block_table`` too) must be on ``q``'s device, and the outputs are allocated there.

    CUDA graphs: eager GPU calls copy ``cache_seqlens`` and ``block_table`` to the host to check
    them (waiting for the stream). A call captured with ``torch.cuda.graph`` waits for nothing: the
    kernels read a block id outside ``[0, num_blocks)`` as zero keys and clamp lengths to the cache
    (such a call's result is undefined, but no memory outside the tensors is touched). The plan
    depends on the cache's capacity, not on the lengths, so a graph replays correctly after
    ``cache_seqlens`` and ``block_table`` are changed in place (pass them as device tensors: one int
    is captured as a constant).

    Args:
        q: ``[B, S_q, H_q, D]``, float32, float16 or bfloat16.
        k_cache: paged ``[num_blocks, block_size, H_kv, D]`` with ``block_table``, or dense
            ``[B, S_max, H_kv, D]`` without. Written when ``k``/``v`` are given.
        v_cache: same shape and dtype as ``k_cache``.
        k, v: optional new keys and values ``[B, S_new, H_kv, D]`` (the cache's dtype), written into
            the cache at positions ``cache_seqlens[b] ..`` before attending.
        cache_seqlens: int ``[B]`` (or one int for every sequence): positions already in the cache.
            Sequence ``b`` attends to its first ``cache_seqlens[b] + S_new`` positions. On the GPU an
            integer tensor on ``q``'s device (converted to int32 there); one int becomes a new one.
        block_table: int ``[B, max_blocks]``: position ``p`` of sequence ``b`` is slot
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
            an append that does not fit, negative cache_seqlens, non-finite values (host arrays),
            arrays on different devices, on the GPU ``S_q > 16`` or a policy other than ``exact``
            and ``fdpp``, and every check of :func:`pasa.attention`.
    """
    causal = flag_argument(causal, "causal")
    alignment_argument(causal_alignment)
    return_softmax_lse = flag_argument(return_softmax_lse, "return_softmax_lse")
    scale = _check_scale(softmax_scale, "softmax_scale")
    check_torch_out_beside_torch_q(out, q)
    written = (("out", out),) + ((("k_cache", k_cache), ("v_cache", v_cache)) if k is not None else ())
    _refuse_written_indices((("cache_seqlens", cache_seqlens), ("block_table", block_table)), written)
    device = _cuda_device(q)
    place = _placer(device)
    q, k_cache, v_cache = (place(x, name) for name, x in
                           (("q", q), ("k_cache", k_cache), ("v_cache", v_cache)))
    k, v = (None if x is None else place(x, name) for name, x in (("k", k), ("v", v)))
    if len(q.shape) != 4:
        raise PasaError(f"q: expected a 4-D array [B, S_q, H_q, D], got shape {tuple(q.shape)}")
    batch, s_q, heads_q = (int(n) for n in q.shape[:3])
    if device is None:
        if _is_int(cache_seqlens):
            cache_seqlens = np.full(batch, cache_seqlens)
        seqlens = _int32(cache_seqlens, "cache_seqlens")
        table = None if block_table is None else _int32(_columns_read(block_table, seqlens, k, k_cache),
                                                        "block_table")
    else:
        if _is_int(cache_seqlens):
            if not np.iinfo(np.int32).min <= int(cache_seqlens) <= np.iinfo(np.int32).max:
                raise PasaError("cache_seqlens: values do not fit in int32")
            import torch

            seqlens = torch.full((batch,), int(cache_seqlens), dtype=torch.int32, device=device)
        else:
            seqlens = _device_int32(cache_seqlens, "cache_seqlens", device)
        table = None if block_table is None else _device_int32(block_table, "block_table", device)
    given_out = out  # returned as given (place() may make a detached view of it)
    if out is None:
        out = _new_output(q, tuple(int(n) for n in q.shape), "out")
    else:
        out = place(out, "out")
        check_given_out(out, tuple(q.shape))
    if k is not None:  # (the appended rows are written into the caches; a read-only array the C++ call names)
        for name, cache in (("k_cache", k_cache), ("v_cache", v_cache)):
            if is_torch_tensor(cache):
                check_writable(cache, name)
    lse = _new_output(q, (batch, heads_q, s_q), "lse", dtype=np.float32) if return_softmax_lse else None
    _run(_core.attention_with_kvcache, device, (q, k_cache, v_cache, k, v, out, lse, seqlens, table),
         (core_policy(policy), causal, causal_alignment, scale),
         written=(out, k_cache, v_cache) if k is not None else (out,), captured_workspace=True)
    result = out if given_out is None else given_out
    return (result, lse) if return_softmax_lse else result
