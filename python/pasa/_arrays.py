# SPDX-License-Identifier: Apache-2.0
"""What pasa needs to know about the caller's arrays, without importing any framework."""

from __future__ import annotations

import sys
from typing import Any, Optional, Tuple

import numpy as np

from . import _core
from ._errors import PasaError, allocation_error

_DL_CPU = 1
_DL_CUDA = 2


_torch_module: Any = None  # torch, once seen imported (set by pasa._torch too)


def _imported_torch() -> Any:
    global _torch_module
    _torch_module = sys.modules.get("torch")
    return _torch_module


def check_not_meta(x: Any, name: str) -> None:
    """A torch meta tensor is a PasaError naming it where a call reads values."""
    if is_torch_tensor(x) and x.device.type == "meta":
        raise PasaError(f"{name}: a meta tensor (a shape without values); this call reads its values")


def is_torch_tensor(x: Any) -> bool:
    """True for a torch.Tensor (torch is only looked at if the caller already imported it).

    torch.compile traces this; once torch is known it reads no sys.modules, which Dynamo cannot
    always trace (other imports may change it during tracing).
    """
    torch = _torch_module or _imported_torch()
    return torch is not None and isinstance(x, torch.Tensor)


def is_cupy_array(x: Any) -> bool:
    cupy = sys.modules.get("cupy")
    return cupy is not None and isinstance(x, cupy.ndarray)


def as_kernel_argument(x: Any) -> Any:
    """What to hand the extension for x: a DLPack capsule made without stream synchronization for
    CuPy (pasa runs on the caller's current stream, so none is needed), otherwise x itself."""
    if is_cupy_array(x):
        try:
            return x.__dlpack__(stream=-1)
        except (TypeError, BufferError):
            return x
    return x


def check_array(x: Any, name: str, any_byte_order: bool = False, index: bool = False) -> None:
    """Raises PasaError unless x is an array pasa can read (NumPy or any DLPack producer): for the
    extension's calls in native byte order and of a dtype DLPack carries (DLPack has no other), for
    the file writers any (any_byte_order); an index array (index: cu_seqlens and the like, which pasa
    converts itself) may also be in either byte order and hold Python ints in an object array; a torch
    tensor without a lazy sign (check_sign_bits)."""
    if isinstance(x, np.ma.MaskedArray):  # (its data would be read whole, the masked entries too)
        # (the file writers' name is a path, not an argument: the fix is said of the array)
        fix = "the array's .filled(value)" if any_byte_order else f"{name}.filled(value) (or attn_mask= for masked keys)"
        raise PasaError(f"{name}: a NumPy masked array, whose mask pasa would ignore; pass {fix}")
    if isinstance(x, np.ndarray):
        # (what DLPack cannot carry, which the extension's binding would refuse with a TypeError)
        if not (any_byte_order or index or _dlpack_dtype(x.dtype) or is_ml_dtypes_bfloat16_dtype(x.dtype)):
            raise PasaError(f"{name}: unsupported dtype {x.dtype} (pasa takes float32, float16 or bfloat16)")
        if not (any_byte_order or index) and not x.dtype.isnative:
            raise PasaError(f"{name}: a {x.dtype.str} array is not in this machine's byte order; pass "
                            f"{name}.astype({name}.dtype.newbyteorder('='))")
        if not (any_byte_order or index):
            check_whole_strides(x, name)
        return
    if hasattr(type(x), "__dlpack__"):
        check_strided(x, name)
        check_sign_bits(x, name)
        return
    raise PasaError(
        f"{name}: expected an array (numpy.ndarray, torch.Tensor, cupy/jax array or any DLPack "
        f"producer), got {type(x).__name__}"
    )


def check_whole_strides(x: np.ndarray, name: str) -> None:
    """Raises PasaError for a NumPy array whose strides are not whole elements (a field of a
    structured array), which DLPack cannot describe."""
    if any(st % x.itemsize for st in x.strides):
        raise PasaError(f"{name}: strides {x.strides} are not whole {x.itemsize}-byte elements (a field of "
                        f"a structured array); pass np.ascontiguousarray({name})")


def is_dense_tensor(x: Any) -> bool:
    """Whether x is a torch tensor of the strided layout (not sparse, not nested)."""
    return is_torch_tensor(x) and not x.is_nested and x.layout == _torch_module.strided


def check_strided(x: Any, name: str) -> None:
    """Raises PasaError for a torch tensor that is not dense: sparse, nested (which has no shape to
    give) or of another layout."""
    if is_torch_tensor(x) and not is_dense_tensor(x):
        kind = "nested" if x.is_nested else str(x.layout).replace("torch.", "")
        raise PasaError(f"{name}: a {kind} tensor; pasa takes dense (strided) tensors")


_DLPACK_TYPES = (np.bool_, np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64,
                 np.float16, np.float32, np.float64, np.complex64, np.complex128)


def _dlpack_dtype(dtype: np.dtype) -> bool:
    """Whether NumPy exports ``dtype`` through DLPack: its own bool, integers, floats of up to 8 bytes
    and complex of up to 16 (not longdouble, object, strings, datetimes, structured types, or the
    types other packages register, such as ml_dtypes' float8_e5m2, which NumPy cannot export)."""
    return dtype.type in _DLPACK_TYPES


def check_sign_bits(x: Any, name: str) -> None:
    """Raises PasaError for a torch tensor whose negative or conjugate bit is set (a lazy view such as
    z.conj().imag): DLPack hands over its memory, which holds the values without that sign, so pasa
    would read them, or write its results, negated or unconjugated."""
    if is_torch_tensor(x) and (x.is_neg() or x.is_conj()):
        bit, fix = ("negative", "resolve_neg") if x.is_neg() else ("conjugate", "resolve_conj")
        raise PasaError(f"{name}: a tensor with torch's {bit} bit set (a lazy view such as z.conj().imag), "
                        f"whose memory does not hold its values; pass {name}.{fix}()")


def is_ml_dtypes_bfloat16(x: Any) -> bool:
    """True for a NumPy array of ml_dtypes' bfloat16 (what JAX hands to NumPy): NumPy itself has no
    bfloat16, so such arrays cannot cross DLPack and are converted (exactly) to float32 instead."""
    return isinstance(x, np.ndarray) and is_ml_dtypes_bfloat16_dtype(x.dtype)


def is_ml_dtypes_bfloat16_dtype(dtype: Any) -> bool:
    return isinstance(dtype, np.dtype) and dtype.name == "bfloat16" and dtype.kind == "V"


def check_writable(x: Any, name: str) -> None:
    """Raises PasaError for an array the call would write (an output, an appended cache) that may not
    be written: a read-only NumPy array, or a torch inference tensor outside torch.inference_mode()
    (torch refuses in-place writes to one there; pasa's writes go past torch's checks)."""
    if isinstance(x, np.ndarray) and not x.flags.writeable:
        raise PasaError(f"{name}: array is read-only")
    # (torch.compile and torch.export cannot trace the test; their graphs write no inference tensor)
    if (is_torch_tensor(x) and not _torch_module.compiler.is_compiling() and x.is_inference()
            and not _torch_module.is_inference_mode_enabled()):
        raise PasaError(f"{name}: an inference tensor, which may be written in place only inside "
                        f"torch.inference_mode()")


def addresses_an_element_twice(shape: Tuple[int, ...], strides: Tuple[int, ...]) -> bool:
    """Whether strides (in elements) address some element of ``shape`` more than once (a stride of 0,
    interleaved dimensions), the rule the C++ calls apply to every output they write: unless the
    dimensions of size > 1, by |stride|, each step past all that the smaller ones span. (An empty
    array addresses none.)"""
    if 0 in shape:
        return False
    spanned = 0
    for stride, size in sorted((abs(st), n) for st, n in zip(strides, shape) if n > 1):
        if stride <= spanned:
            return True
        spanned += (size - 1) * stride
    return False


def check_distinct_elements(x: np.ndarray, name: str) -> None:
    """Raises PasaError where an output array's strides address some element more than once
    (addresses_an_element_twice)."""
    strides = tuple(st // x.itemsize for st in x.strides)
    if addresses_an_element_twice(x.shape, strides):
        raise PasaError(f"{name}: sizes {list(x.shape)} with strides {list(strides)} "
                        "address some elements more than once, so results written there would be lost "
                        "(an output needs its own element for every index: no stride of 0, no "
                        "interleaved dimensions)")


def check_given_out(out: Any, q_shape: Tuple[int, ...]) -> None:
    """Raises PasaError unless the ``out`` a caller gave can be written (check_writable) and has q's
    shape (in the caller's layout)."""
    check_writable(out, "out")
    out_shape = tuple(out.shape)  # (no int(): under torch.export a size may be symbolic)
    if out_shape != tuple(q_shape):
        raise PasaError(f"out: shape {out_shape} differs from q's {tuple(q_shape)}")


_NO_DLPACK_DEVICE = -1  # a torch meta tensor: a shape without values, on no device DLPack knows


def dlpack_device(x: Any) -> Tuple[int, int]:
    """(DLPack device type, index); (1, 0) is the host, (-1, 0) a torch meta tensor."""
    if isinstance(x, np.ndarray):
        return (_DL_CPU, 0)
    if is_torch_tensor(x):
        # (from torch's own device where it names one: torch.compile cannot trace the enum that
        # __dlpack_device__ returns)
        kind = x.device.type
        if kind == "meta":
            return (_NO_DLPACK_DEVICE, 0)
        if kind == "cpu":
            return (_DL_CPU, 0)
        if kind == "cuda" and not _torch_module.version.hip:
            return (_DL_CUDA, x.device.index)
    device = getattr(x, "__dlpack_device__", None)
    if device is None:
        return (_DL_CPU, 0)
    kind, index = device()
    return (int(kind), int(index))


def reserve_host_output(nbytes: int, name: str, shape: Tuple[int, ...]) -> None:
    """PasaError naming output ``name`` unless the machine has room for its ``nbytes``. Checked before
    the output is allocated, which then writes it at once: pages an allocation has not written yet
    still count as free memory, so the call's own memory check would not see them, and the call
    would be killed for memory instead of refused."""
    _core.require_memory(min(nbytes, 2**64 - 1), f"{name}: a new array of shape {list(shape)}")


def new_torch_output(shape: Tuple[int, ...], dtype: Any, device: Any, name: str,
                     fill: Optional[float] = None) -> Any:
    """A new torch tensor for output ``name``, filled with ``fill`` where given. On the host its memory
    is checked first and it is written at once (reserve_host_output: zeros without a fill); on a GPU
    it is left unwritten without one. Running out of host memory is a PasaError naming it."""
    import torch

    on_host = device.type == "cpu"
    if on_host:
        reserve_host_output(int(np.prod(shape, dtype=object)) * dtype.itemsize, name, shape)
    try:
        if fill is None and not on_host:
            return torch.empty(shape, dtype=dtype, device=device)
        return torch.full(shape, 0.0 if fill is None else fill, dtype=dtype, device=device)
    except RuntimeError as e:
        raise allocation_error(e, name, shape)


def new_host_output(shape: Tuple[int, ...], dtype: Any, name: str, fill: float = 0.0) -> np.ndarray:
    """A new host array filled with ``fill``, its memory checked and taken before the call
    (reserve_host_output); running out of memory is a PasaError naming the output."""
    nbytes = int(np.prod(shape, dtype=object)) * np.dtype(dtype).itemsize
    reserve_host_output(nbytes, name, shape)
    try:
        array = np.empty(shape, dtype=dtype)
    except (MemoryError, ValueError):  # ValueError: beyond what NumPy can even describe
        raise PasaError(f"{name}: cannot allocate {shape} {np.dtype(dtype).name} ({nbytes} bytes): "
                        f"not enough memory") from None
    array.fill(fill)
    return array


def check_rank4(shape: Tuple[int, ...], name: str, layout: str) -> None:
    """PasaError naming ``name`` unless ``shape`` has the 4 dimensions of ``layout``."""
    if len(shape) != 4:
        dims = "[B, H, S, D]" if layout == "bhsd" else "[B, S, H, D]"
        raise PasaError(f"{name}: expected a 4-D array {dims} (layout '{layout}'), got {len(shape)}-D "
                        f"with shape {tuple(shape)}")


def check_torch_out_beside_torch_q(out: Any, q: Any) -> None:
    """PasaError for a torch out= beside a q of another kind: the result is a torch tensor exactly when
    q is one (through DLPack, torch's in-place rules and autograd would not see a write into it)."""
    if out is not None and is_torch_tensor(out) and not is_torch_tensor(q):
        kind = f"{type(q).__module__.split('.')[0]}.{type(q).__name__}"
        raise PasaError(f"out: a torch.Tensor, but q is a {kind}: give torch q, k and v with a torch out=")


def allocate_outputs(q: Any, layout: str, return_lse: bool, out: Optional[Any],
                     stream: Optional[int]) -> Tuple[Any, Optional[Any], int]:
    """(out, lse, stream) for a non-torch call: NumPy outputs for host arrays, CuPy outputs and
    CuPy's current stream for CuPy arrays; other device arrays need ``out=``."""
    shape = tuple(int(n) for n in q.shape)
    check_rank4(shape, "q", layout)
    b, h, s = (shape[0], shape[1], shape[2]) if layout == "bhsd" else (shape[0], shape[2], shape[1])
    if out is not None:
        check_array(out, "out")
        check_given_out(out, shape)
        check_torch_out_beside_torch_q(out, q)
    if is_cupy_array(q):
        import cupy

        if out is None:
            out = cupy.empty(shape, dtype=q.dtype)
        lse = cupy.empty((b, h, s), dtype=cupy.float32) if return_lse else None
        if stream is None:
            stream = cupy.cuda.get_current_stream().ptr
        return out, lse, int(stream)
    kind, _ = dlpack_device(q)
    if kind == _DL_CPU:
        if out is None:
            try:
                dtype = q.dtype if isinstance(q, np.ndarray) else np.dtype(str(q.dtype))
            except TypeError:
                raise PasaError(f"out: NumPy has no dtype {q.dtype}; pass out= (a float32 NumPy "
                                f"array, say)") from None
            out = new_host_output(shape, dtype, "out")
        lse = new_host_output((b, h, s), np.float32, "lse") if return_lse else None
        return out, lse, int(stream or 0)
    if out is None or return_lse:
        raise PasaError(
            f"out: pasa allocates outputs for numpy, torch and cupy arrays; for a "
            f"{type(q).__name__} on a device pass out= (and use torch or cupy for return_lse=True)"
        )
    return out, None, int(stream or 0)
