# SPDX-License-Identifier: Apache-2.0
"""pasa.load and pasa.save: .npy and .safetensors files through the C++ readers and writers.

Files are untrusted input: a malformed, truncated or inconsistent file raises PasaError naming the
file. pasa files hold float32, float16 or bfloat16 tensors in C order. NumPy has no bfloat16, so
bfloat16 tensors load as float32 arrays (exactly: every bfloat16 value is a float32 value). Paths are
str, bytes or path-like, passed to the system as os.fsencode gives them (file names that are not
UTF-8 work); a path holding a NUL character raises PasaError.
"""

from __future__ import annotations

import os
from typing import Any, Dict, Mapping, Union

import numpy as np

from . import _core
from ._arrays import check_array, check_not_meta, is_ml_dtypes_bfloat16, is_torch_tensor
from ._errors import PasaError

__all__ = ["load", "save"]

PathLike = Union[str, bytes, "os.PathLike[str]", "os.PathLike[bytes]"]


def file_path(path: PathLike, argument: str = "path") -> bytes:
    """The file name's bytes, as the C++ readers and writers take them, or PasaError naming
    ``argument``. os.fsencode passes on the names os.listdir gives for bytes that are not UTF-8
    (surrogate escapes, "\\udcff") as those bytes. A NUL is refused: the system calls would read
    the name only up to it ("notes.txt\\0.npy" would open notes.txt)."""
    if not isinstance(path, (str, bytes, os.PathLike)):
        raise PasaError(f"{argument}: expected a file path, got {type(path).__name__}")
    try:
        raw = os.fsencode(path)
    except UnicodeEncodeError:  # a lone surrogate that no surrogate escape made
        raise PasaError(f"{argument}: {os.fspath(path)!r} is not a valid file name (it holds a lone "
                        f"surrogate)") from None
    if b"\0" in raw:
        raise PasaError(f"{argument}: {os.fsdecode(raw)!r} contains a NUL character, which no file "
                        f"name can hold")
    return raw


def _kind(raw: bytes) -> str:
    for suffix in (".npy", ".safetensors"):
        if raw.endswith(suffix.encode()):
            return suffix
    raise PasaError(f"{os.fsdecode(raw)}: unknown file type (expected .npy or .safetensors)")


def load(path: PathLike) -> Union[np.ndarray, Dict[str, np.ndarray]]:
    """Reads a ``.npy`` file (one array) or a ``.safetensors`` file (a dict of name -> array).

    float32 and float16 tensors load as such; bfloat16 tensors load as float32.
    """
    raw = file_path(path)
    if _kind(raw) == ".npy":
        return _core.load_npy(raw)
    return dict(_core.load_safetensors(raw))


_FILE_DTYPES = ("float32", "float16", "bfloat16")


def _host_array(x: Any, name: str) -> Any:
    check_not_meta(x, name)
    if is_torch_tensor(x):
        if x.is_quantized or x.is_nested or str(x.layout) != "torch.strided":  # (sparse and nested layouts)
            kind = "quantized" if x.is_quantized else "nested" if x.is_nested else str(x.layout)
            raise PasaError(f"{name}: a {kind} tensor; pasa files hold dense float32, float16 or bfloat16 values")
        # (a lazy sign resolved: the file holds the tensor's values, not its memory)
        return x.detach().cpu().resolve_conj().resolve_neg().contiguous()
    if isinstance(x, np.generic):  # a NumPy scalar (np.float32(1.5)): the 0-d array of its value
        x = np.asarray(x)
    check_array(x, name, any_byte_order=True)
    if is_ml_dtypes_bfloat16(x):  # (NumPy exports no DLPack for them)
        raise PasaError(f"{name}: NumPy arrays of ml_dtypes' bfloat16 cannot be saved; save "
                        "x.astype(np.float32) (exact) or a torch bfloat16 tensor")
    if isinstance(x, np.ndarray):
        if x.dtype.name not in _FILE_DTYPES:
            raise PasaError(f"{name}: unsupported dtype {x.dtype} (pasa files hold float32, float16 "
                            f"or bfloat16)")
        try:
            if not x.dtype.isnative:  # the same values in the byte order the files use
                x = x.astype(x.dtype.newbyteorder("="))
            # Not np.ascontiguousarray: it turns a 0-d array into shape (1,).
            return x if x.flags.c_contiguous else x.copy(order="C")
        except MemoryError:
            raise PasaError(f"{name}: out of memory making a contiguous copy of shape {x.shape} to "
                            f"write") from None
    return x


def _tensor_name(name: Any, file: str) -> str:
    """A name a .safetensors header stores exactly (JSON text, UTF-8), or PasaError."""
    if not isinstance(name, str) or not name:
        raise PasaError(f"{file}: tensor names must be non-empty strings, got {name!r}")
    if "\0" in name:
        raise PasaError(f"{file}: tensor name {name!r} contains a NUL character, which the file "
                        f"cannot store")
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        raise PasaError(f"{file}: tensor name {name!r} is not valid Unicode text (a lone "
                        f"surrogate); safetensors names are UTF-8") from None
    return name


def save(path: PathLike, data: Union[Any, Mapping[str, Any]]) -> None:
    """Writes one array to a ``.npy`` file, or a dict of name -> array to a ``.safetensors`` file.

    Arrays may be NumPy arrays or host DLPack arrays (torch tensors on any device are copied to
    the host), or NumPy scalars (0-d), of float32, float16 or bfloat16, of rank up to 8 (0-d and
    zero-size included); other dtypes raise PasaError rather than being converted silently
    (big-endian arrays are stored in the files' little-endian order, values unchanged). Tensor names
    must be non-empty text without NUL characters. The file is replaced whole or not at all: it is
    written to a temporary file next to it, then renamed over it.
    """
    raw = file_path(path)
    text = os.fsdecode(raw)  # (for messages)
    if _kind(raw) == ".npy":
        if isinstance(data, Mapping):
            raise PasaError(f"{text}: a .npy file holds one array; save a dict as .safetensors")
        _core.save_npy(raw, _host_array(data, text))
        return
    if not isinstance(data, Mapping):
        raise PasaError(
            f"{text}: a .safetensors file holds named tensors; pass a dict such as {{'q': q}}"
        )
    arrays = {}
    for name, array in data.items():
        arrays[_tensor_name(name, text)] = _host_array(array, f"{text}: tensor {name!r}")
    _core.save_safetensors(raw, arrays)
