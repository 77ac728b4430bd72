# SPDX-License-Identifier: Apache-2.0
"""pasa.capture and pasa.patch: recording and rerouting a torch model's attention calls.

Both work on ``torch.nn.functional.scaled_dot_product_attention``: models that call it as
``F.scaled_dot_product_attention`` (``torch.nn.MultiheadAttention`` does with ``need_weights=False``,
off its inference fast path) are covered; code
that bound the function to its own name at import time (``from torch.nn.functional import
scaled_dot_product_attention``) is not, and neither are graphs torch.compile built before.

Calls are named the same way in both, so a plan written from a capture applies to a patch: by
default ``layer0``, ``layer1``, ... in call order (``layer3_t10`` when the handle's ``timestep`` is set:
the names ``pasa calibrate`` reads), or whatever ``name_fn(CallInfo)`` returns,
where a :class:`CallInfo` holds the call's index, the name of the innermost submodule of ``model``
that made it (its ``named_modules()`` name) and the ``timestep`` the caller set on the handle.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import os
import re
import sys
import threading
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple, Union

from . import _core
from ._api import sdpa
from ._arrays import check_not_meta
from ._errors import PasaError, flag_argument
from ._fallback import compiling, run_or_fallback, score_mods_refusal, sdpa_precheck, warm_score_mods
from ._io import file_path, save
from ._policy import Policy, PolicyLike

__all__ = ["CallInfo", "Capture", "Patch", "capture", "patch", "default_name"]


@dataclasses.dataclass(frozen=True)
class CallInfo:
    """One scaled_dot_product_attention call, as naming functions see it."""

    index: int  #: order of the call since the capture began (or the patch's last reset), from 0
    layer: Optional[str]  #: innermost running submodule of the model (None without a model)
    timestep: Optional[int]  #: the handle's ``timestep`` attribute at the time of the call


NameFn = Callable[[CallInfo], str]


def default_name(call: CallInfo) -> str:
    """``layer<index>``, or ``layer<index>_t<timestep>`` when a timestep is set (a whole float as an
    int, as a capture records it): the default name."""
    if call.timestep is None:
        return f"layer{call.index}"
    timestep = call.timestep
    if isinstance(timestep, float) and timestep.is_integer():
        timestep = int(timestep)
    return f"layer{call.index}_t{timestep}"


# A name's timestep suffix (default_name's "_t<timestep>", the timestep a number: 7, -1, 999.0, 1e-05),
# which a plan's timestep-free entry drops.
_TIMESTEP_SUFFIX = re.compile(r"_t[-+]?([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][-+]?[0-9]+)?$")
_SDPA_PARAMS = ("query", "key", "value", "attn_mask", "dropout_p", "is_causal", "scale",
                "enable_gqa")
_SDPA_POSITIONAL = 6  # (scale and enable_gqa are keyword-only)


def _bind(args: Tuple[Any, ...], kwargs: Mapping[str, Any]) -> Optional[Dict[str, Any]]:
    """scaled_dot_product_attention's arguments by name; None where torch would refuse the call's
    (too many, an unknown name, one given twice: torch's own call then raises its TypeError)."""
    if len(args) > _SDPA_POSITIONAL or any(
            name not in _SDPA_PARAMS or name in _SDPA_PARAMS[:len(args)] for name in kwargs):
        return None
    bound = dict(zip(_SDPA_PARAMS, args))
    bound.update(kwargs)
    if not isinstance(bound.get("is_causal", False), bool):  # (torch takes a bool only)
        return None
    return bound


def _plain_timestep(value: Any) -> Any:
    """A timestep as a capture records it: a NumPy or one-element torch scalar (an item of a
    scheduler's timesteps) as the Python number it holds, which the index can store."""
    size = value.numel() if hasattr(value, "numel") else getattr(value, "size", None)
    plain = value.item() if size == 1 and hasattr(value, "item") else value
    # (a whole float as an int: a flow-matching scheduler's 999.0 names layer0_t999, as pasa calibrate
    # reads names)
    return int(plain) if isinstance(plain, float) and plain.is_integer() else plain


def _require_torch(what: str) -> Any:
    try:
        import torch
    except ImportError as error:  # pragma: no cover - exercised where torch is absent
        raise ImportError(f"{what} needs torch (pip install torch)") from error
    return torch


def _check_name(name: Any, call: CallInfo) -> str:
    if not isinstance(name, str) or not name:
        raise PasaError(f"name_fn: returned {name!r} for call {call.index}; expected a non-empty "
                        f"string")
    parts = name.split("/")
    if name.startswith("/") or "\\" in name or "\0" in name or any(
            part in ("", ".", "..") for part in parts):
        raise PasaError(f"name_fn: {name!r} (call {call.index}) is not a relative file name "
                        f"(use letters, digits, '.', '_', '-' and '/' between non-empty parts)")
    return name


class _SavedHooks:
    """What a patch's or a layer tracker's hooks load as from a model saved whole while they were on it
    (pickle, torch.save): hooks that do nothing. The process that loads the model routes nothing
    until it patches the model itself."""

    def _enter(self, *args: Any) -> None:
        return None

    def _exit(self, *args: Any) -> None:
        return None


def _saved_hooks() -> _SavedHooks:
    return _SavedHooks()


class _LayerTracker:
    """Which submodule of a model runs right now, per thread (forward hooks on every submodule)."""

    def __init__(self, model: Any) -> None:
        self._local = threading.local()
        self._handles: List[Any] = []
        for name, module in model.named_modules():
            self._handles.append(
                module.register_forward_pre_hook(functools.partial(self._enter, name)))
            self._handles.append(module.register_forward_hook(
                functools.partial(self._exit, name), always_call=True))

    def _stack(self) -> List[str]:
        stack = getattr(self._local, "stack", None)
        if stack is None:
            stack = self._local.stack = []
        return stack

    def _enter(self, name: str, module: Any, args: Any) -> None:
        stack = self._stack()
        # The model itself, not called from its own forward: whatever the stack holds was left by a
        # forward that a KeyboardInterrupt stopped (torch runs always_call hooks on Exception only),
        # even where that left the model's own entry (only a forward still running keeps it; not
        # looked for while torch.compile traces, which reads no frames).
        if name == "" and ("" not in stack or (not compiling() and not _forward_running(module))):
            stack.clear()
        stack.append(name)

    def _exit(self, name: str, module: Any, args: Any, output: Any) -> None:
        stack = self._stack()
        if stack and stack[-1] == name:
            stack.pop()

    def current(self) -> Optional[str]:
        stack = self._stack()
        return stack[-1] if stack else None

    def __deepcopy__(self, memo: Any) -> "_LayerTracker":
        return self  # (a model copied with its hooks, an EMA copy say: the copy's calls are tracked too)

    def __reduce__(self) -> Any:
        return (_saved_hooks, ())  # (a model saved whole: see _SavedHooks)

    def remove(self) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles.clear()


class Capture:
    """Records the Q/K/V of every scaled_dot_product_attention call; see :func:`capture`."""

    def __init__(self, directory: Union[str, "os.PathLike[str]"], *, model: Any = None,
                 name_fn: Optional[NameFn] = None, overwrite: bool = False) -> None:
        if not isinstance(directory, (str, os.PathLike)):
            raise PasaError(f"directory: expected a path, got {type(directory).__name__}")
        file_path(directory, "directory")  # (a NUL refused here, not by os.makedirs' ValueError)
        if name_fn is not None and not callable(name_fn):
            raise PasaError(f"name_fn: expected a callable CallInfo -> str, got "
                            f"{type(name_fn).__name__}")
        self.directory: str = os.fspath(directory)
        self.timestep: Optional[int] = None  #: set by the caller; recorded with each call
        self.entries: List[Dict[str, Any]] = []  #: one dict per recorded call (index.json)
        self._model = model
        self._name_fn: NameFn = name_fn or default_name
        self._overwrite = flag_argument(overwrite, "overwrite")
        self._names: set = set()
        self._lock = threading.Lock()
        self._first_index = 0  # the entry where call numbering restarted (reset())
        self._in_name_fn = threading.local()  # (SDPA calls a name_fn makes are not recorded)
        self._tracker: Optional[_LayerTracker] = None
        self._active = False
        self._claimed: Optional[str] = None

    def __enter__(self) -> Capture:
        torch = _require_torch("pasa.capture")
        if self._active:
            raise PasaError("capture: this capture is already active")
        if self._model is not None and not isinstance(self._model, torch.nn.Module):
            raise PasaError(f"model: expected a torch.nn.Module, got {type(self._model).__name__}")
        index = os.path.join(self.directory, "index.json")
        if os.path.exists(index) and not self._overwrite:
            raise PasaError(f"directory: {self.directory} already holds a capture (index.json); "
                            f"pass overwrite=True or choose another directory")
        try:
            os.makedirs(self.directory, exist_ok=True)
        except OSError as e:
            raise PasaError(f"directory: cannot create {self.directory}: {e.strerror or e}") from None
        self._claimed = _claim_directory(self.directory)
        try:
            if os.path.exists(index):
                self._remove_previous_capture(index)
        except BaseException:
            _release_directory(self._claimed)
            self._claimed = None
            raise
        with self._lock:  # (each block is a capture of its own: this object's earlier one was removed)
            self.entries = []
            self._names = set()
            self._first_index = 0
        self._tracker = _LayerTracker(self._model) if self._model is not None else None
        _recorder_acquire(torch.nn.functional, self)
        self._active = True
        return self

    def _remove_previous_capture(self, index: str) -> None:
        """overwrite=True: the files the directory's index lists, then the index (a new capture with
        fewer calls would otherwise leave the old one's later files beside it)."""
        try:
            with open(index) as f:
                document = json.load(f)
            ours = document.get("format") == "pasa-capture-1"
            entries = document.get("entries", []) if ours else []
            files = [e["file"] for e in entries if isinstance(e, dict) and isinstance(e.get("file"), str)
                     and e["file"].endswith(".safetensors")]
        except (OSError, ValueError, AttributeError):
            files = []  # (an unreadable index, or another tool's: only it is replaced)
        for name in files:
            path = os.path.normpath(os.path.join(self.directory, name))
            if os.path.dirname(os.path.relpath(path, self.directory)).startswith(".."):
                continue  # (never outside the directory)
            try:
                os.remove(path)
            except FileNotFoundError:
                pass
            except OSError as e:
                raise PasaError(f"directory: cannot remove the previous capture's {name}: "
                                f"{e.strerror or e}") from None
        try:
            os.remove(index)
        except OSError as e:
            raise PasaError(f"directory: cannot remove the previous capture's index.json: "
                            f"{e.strerror or e}") from None

    def __exit__(self, *exc: Any) -> None:
        if not self._active:
            return
        import torch

        _recorder_release(torch.nn.functional, self)
        self._active = False
        if self._tracker is not None:
            self._tracker.remove()
            self._tracker = None
        try:
            self.write_index()
        except PasaError:
            if exc[0] is None:
                raise
            # (the error that ended the block is the one to see; the index of the calls it recorded
            # could not be written either)
        finally:
            _release_directory(self._claimed)
            self._claimed = None

    def __reduce__(self) -> Any:  # (copy, deepcopy and pickle)
        raise PasaError(f"a pasa.Capture cannot be copied or pickled: it records into {self.directory}; "
                        f"start another capture for another directory")

    def reset(self) -> None:
        """Restarts call numbering at 0 (e.g. before each generation step), as Patch.reset does, so
        that a patch reset at the same points names its calls as the capture did."""
        with self._lock:
            self._first_index = len(self.entries)

    def write_index(self) -> None:
        """Writes ``index.json`` (done on exit): one entry per call, in call order. The file is
        replaced whole or not at all, as :func:`pasa.save` writes (a temporary file next to it,
        renamed over it, removed if a signal ends the process during the write). Only inside the
        capture's block: once it ends, the directory may be another capture's."""
        if self._claimed is None:
            raise PasaError(f"{self.directory}/index.json: not written: the capture is not running (its "
                            f"block writes the index at its end; after it, the directory may hold another "
                            f"capture's calls)")
        with self._lock:
            try:
                text = json.dumps({"format": "pasa-capture-1", "pasa_version": _core.__version__,
                                   "entries": self.entries}, indent=1, allow_nan=False)
            except (TypeError, ValueError) as error:  # (a timestep set to what JSON cannot hold)
                raise PasaError(f"{self.directory}/index.json: not written: {error} (set timestep to "
                                f"a number or a string)") from None
        path = os.path.join(self.directory, "index.json")
        try:
            _core.save_text(os.fsencode(path), text + "\n")
        except PasaError as e:
            raise PasaError(f"{e} (the index is not written; the capture's tensor files are in place)") from None

    def _record(self, bound: Dict[str, Any]) -> None:
        layer = self._tracker.current() if self._tracker else None
        if self._tracker is not None and layer is None:
            return  # (a call outside the model, a text encoder's say: a patch of it would not see it)
        if getattr(self._in_name_fn, "active", False):
            return  # (an SDPA call the name_fn makes: not the model's)
        timestep = _plain_timestep(self.timestep)
        if isinstance(timestep, float) and not math.isfinite(timestep):  # (index.json could not hold it)
            raise PasaError(f"timestep: {timestep} is not a finite number; set a finite number or a string")
        for param in ("query", "key", "value"):
            check_not_meta(bound[param], param)
        with self._lock:
            call = CallInfo(index=len(self.entries) - self._first_index, layer=layer, timestep=timestep)
            self._in_name_fn.active = True
            try:
                name = _check_name(self._name_fn(call), call)
            finally:
                self._in_name_fn.active = False
            if name in self._names:
                raise PasaError(f"name_fn: name {name!r} of call {call.index} was already used in "
                                f"this capture (include the index or a timestep in names)")
            self._names.add(name)
            tensors = {}
            converted = None
            for key, param in (("q", "query"), ("k", "key"), ("v", "value")):
                tensors[key], from_dtype = _as_bhsd_host(bound[param], param)
                converted = converted or from_dtype
            path = os.path.join(self.directory, name + ".safetensors")
            try:
                os.makedirs(os.path.dirname(path), exist_ok=True)
            except OSError as e:  # (a component too long, or one that is a file)
                raise PasaError(f"name_fn: name {name!r} of call {call.index}: cannot make its folder: "
                                f"{e.strerror or e}") from None
            save(path, tensors)
            scale = bound.get("scale")
            scale = None if scale is None else float(scale)
            self.entries.append({
                "name": name,
                "file": name + ".safetensors",
                "index": call.index,
                "layer": call.layer,
                "timestep": call.timestep,
                "shape": {key: list(t.shape) for key, t in tensors.items()},
                "dtype": str(tensors["q"].dtype).replace("torch.", ""),
                "converted_from": converted,
                "is_causal": bool(bound.get("is_causal", False)),
                "causal_alignment": "top_left",
                # (a NaN or infinite scale as its text: strict JSON has no such numbers)
                "scale": scale if scale is None or math.isfinite(scale) else str(scale),
                "enable_gqa": bool(bound.get("enable_gqa", False)),
                "dropout_p": float(bound.get("dropout_p", 0.0)),
                "attn_mask": bound.get("attn_mask") is not None,
            })


# The directories active captures write (their real paths): two captures into one would each write its
# index over the other's, beside files of both.
_claimed_directories: set = set()
_claims_lock = threading.Lock()


def _claim_directory(directory: str) -> str:
    path = os.path.realpath(directory)
    with _claims_lock:
        if path in _claimed_directories:
            raise PasaError(f"directory: {directory} is being written by another active capture; give "
                            f"each capture a directory of its own")
        _claimed_directories.add(path)
    return path


def _release_directory(path: Optional[str]) -> None:
    with _claims_lock:
        _claimed_directories.discard(path)


def _as_bhsd_host(t: Any, name: str) -> Tuple[Any, Optional[str]]:
    """A host copy of an SDPA operand as [B, H, S, D]; float64 and others become float32."""
    import torch

    t = t.detach()
    converted = None
    if t.dtype not in (torch.float32, torch.float16, torch.bfloat16):
        converted = str(t.dtype).replace("torch.", "")
        t = t.float()
    if t.dim() == 2:  # (L, E): one sequence, one head
        t = t[None, None]
    elif t.dim() == 3:  # (H, L, E): dim -3 is the heads, as torch's GQA reads it
        t = t[None]
    elif t.dim() > 4:
        t = t.reshape(-1, *t.shape[-3:])
    elif t.dim() < 2:
        raise PasaError(f"{name}: {t.dim()}-D tensor in scaled_dot_product_attention; capture "
                        f"records [..., L, E] operands of rank 2 or more")
    return t.cpu().contiguous(), converted


def capture(directory: Union[str, "os.PathLike[str]"], *, model: Any = None,
            name_fn: Optional[NameFn] = None, overwrite: bool = False) -> Capture:
    """A context manager that records the Q/K/V of every SDPA call of a torch model.

    While active, ``torch.nn.functional.scaled_dot_product_attention`` is replaced by a wrapper that
    runs the original and saves its ``query``, ``key`` and ``value`` (detached, on the host, as
    ``[B, H, S, D]``; 3-D operands ``[H, L, E]`` get B = 1, 2-D ones B = H = 1) to ``directory/NAME.safetensors``
    under the names ``q``, ``k``, ``v`` (what ``pasa run --qkv`` and ``pasa calibrate`` read). On exit
    the original function is restored and ``directory/index.json`` lists every call with its name, layer,
    timestep, shapes, dtype and arguments (is_causal is top-left aligned, torch's convention),
    written whole or not at all (a failure to write it is a PasaError, unless another error
    ended the block: that one propagates).

    Args:
        directory: created if needed; refused if it already holds an index.json, unless
            ``overwrite=True``.
        model: a ``torch.nn.Module``; when given, each call's ``CallInfo.layer`` is the innermost
            running submodule (e.g. ``"blocks.3.attn"``).
        name_fn: ``CallInfo -> str`` naming each file (may contain ``/`` for subdirectories);
            default :func:`default_name` (``layer0``, ``layer1``, ...). Names must be unique.
        overwrite: allow a directory that holds an earlier capture; its files (those its
            index.json lists) and its index are removed first. Each ``with`` block of the
            returned object is a capture of its own (a second one, with ``overwrite=True``,
            replaces the first).

    The returned :class:`Capture` has a settable ``timestep`` (e.g. a diffusion step) recorded with
    each call, and ``entries`` (the index). Example::

        name = lambda call: f"t{call.timestep:03d}/{call.layer}"
        with pasa.capture("qkv", model=unet, name_fn=name) as cap:
            for cap.timestep, t in enumerate(scheduler.timesteps):
                unet(latents, t)
    """
    return Capture(directory, model=model, name_fn=name_fn, overwrite=overwrite)


# --- patch: route a module's SDPA calls through pasa --------------------------------------------
#
# One router replaces F.scaled_dot_product_attention while any Patch exists. It sends a call to the
# innermost patched module running in the calling thread, and every other call to the original.

_router_lock = threading.Lock()
_router_users = 0
_router_original: Any = None
_active = threading.local()


def _forward_running(module: Any) -> bool:
    """Whether a call of module's forward is on this thread's stack (a forward pre-hook runs before its
    own call's forward starts, so what it finds is an outer call's). The forward's own code is looked
    for, beneath the wrappers a decorator made (``@torch.no_grad()``, anything ``functools.wraps``
    made), with the module as its first argument, whatever that is named."""
    codes = set()
    forward = getattr(type(module), "forward", None)
    for _ in range(100):
        if forward is None:
            break
        code = getattr(forward, "__code__", None)
        if code is not None and code.co_argcount > 0:
            codes.add(code)
        forward = getattr(forward, "__wrapped__", None)
    frame = sys._getframe(1)
    while frame is not None:
        if frame.f_code in codes and frame.f_locals.get(frame.f_code.co_varnames[0]) is module:
            return True
        frame = frame.f_back
    return False


def _active_patches() -> List[Patch]:
    stack = getattr(_active, "stack", None)
    if stack is None:
        stack = _active.stack = []
    return stack


def _router(*args: Any, **kwargs: Any) -> Any:
    stack = getattr(_active, "stack", None)
    # A removed patch left on the stack by a forward that a KeyboardInterrupt stopped (torch runs
    # always_call hooks on Exception only) routes nothing.
    while stack and stack[-1]._removed:
        stack.pop()
    if not stack:
        return _router_original(*args, **kwargs)
    return stack[-1]._call(args, kwargs)


def _reaches(function: Any, target: Any) -> bool:
    """Whether ``function`` is ``target`` or wraps it (through the recorder and the router to what each
    calls, and through wrappers that functools.wraps made, which leave ``__wrapped__``)."""
    for _ in range(100):
        if function is target:
            return True
        if function is _recorder:
            function = _recorder_original
        elif function is _router:
            function = _router_original
        else:
            function = getattr(function, "__wrapped__", None)
        if function is None:
            return False
    return False


def _routes(function: Any) -> bool:
    """Whether ``function`` is the router or wraps it (a capture entered while a patch was alive
    records through it)."""
    return _reaches(function, _router)


def unrouted_sdpa() -> Callable[..., Any]:
    """torch's scaled_dot_product_attention past the router: what the integrations' fallbacks call
    (through a patch's router they would be routed, and counted, a second time)."""
    import torch.nn.functional as F

    current, original = F.scaled_dot_product_attention, _router_original  # (no lock: Dynamo traces this)
    return original if original is not None and _routes(current) else current


# --- capture's recorder ------------------------------------------------------------------------
#
# One recorder replaces F.scaled_dot_product_attention while any capture is active, whatever the
# order they end in (threads' captures overlap): it calls what it replaced and records the call in
# every active capture. It is taken out when the last ends, from under a router installed on top
# of it too; a wrapper of someone else's on top of it keeps it, recording nothing.

_captures: List[Capture] = []
_recorder_original: Any = None


def _recorder(*args: Any, **kwargs: Any) -> Any:
    result = _recorder_original(*args, **kwargs)
    active = tuple(_captures)  # (a copy: a capture may end in another thread meanwhile)
    if active:
        bound = _bind(args, kwargs)
        for capture in active:
            capture._record(bound)
    return result


def _recorder_acquire(functional: Any, capture: Capture) -> None:
    global _recorder_original
    with _router_lock:
        current = functional.scaled_dot_product_attention
        if not _reaches(current, _recorder):
            _recorder_original = current
            functional.scaled_dot_product_attention = _recorder
        _captures.append(capture)


def _recorder_release(functional: Any, capture: Capture) -> None:
    global _router_original
    with _router_lock:
        _captures.remove(capture)
        if _captures:
            return
        original = _recorder_original
        if original is _router and _router_users == 0:  # (the patches were removed while it recorded)
            original = _router_original
        if functional.scaled_dot_product_attention is _recorder:
            functional.scaled_dot_product_attention = original
        elif _router_original is _recorder:  # (a router installed on top of it)
            _router_original = original


def _router_acquire(functional: Any) -> None:
    global _router_users, _router_original
    with _router_lock:
        current = functional.scaled_dot_product_attention
        if not _routes(current):  # (a recorder around the router keeps recording, and routing)
            if _router_users == 0 or _router_original is None:
                _router_original = current
            functional.scaled_dot_product_attention = _router
        _router_users += 1


def _router_release(functional: Any) -> None:
    global _router_users
    with _router_lock:
        _router_users -= 1
        if _router_users == 0 and functional.scaled_dot_product_attention is _router:
            functional.scaled_dot_product_attention = _router_original


def _without_repeated_keys(pairs: List[Tuple[str, Any]]) -> Dict[str, Any]:
    """A JSON object's pairs as a dict, or ValueError for a key given twice (which json.load would
    take as its last value, where the C++ plan reader refuses it)."""
    data: Dict[str, Any] = {}
    for key, value in pairs:
        if key in data:
            raise ValueError(f"duplicate key {key!r}")
        data[key] = value
    return data


def _load_plan(plan: Any) -> Tuple[Optional[str], Dict[str, str]]:
    """(default policy, {call name: policy}) from a mapping or a JSON file, every policy checked."""
    origin, text = "plan", None
    if isinstance(plan, (str, os.PathLike)):
        origin = os.fspath(plan)
        try:
            with open(origin) as f:
                text = f.read()
            data = json.loads(text, object_pairs_hook=_without_repeated_keys)
        except (OSError, ValueError, RecursionError) as error:
            raise PasaError(f"plan: cannot read {origin}: {error}") from None
    else:
        data = plan
    if not isinstance(data, Mapping):
        raise PasaError(f"plan: expected a mapping of call name -> policy (or a JSON file of one), "
                        f"got {type(data).__name__}")
    if "entries" in data or "fast" in data:  # a plan written by `pasa calibrate`: the C++ reader's
        if text is None:
            try:
                text = json.dumps(data)
            except (TypeError, ValueError, RecursionError) as error:  # ValueError: a circular reference
                raise PasaError(f"plan: not a pasa calibrate plan ({error})") from None
        default, _, _, table = _core.parse_plan(text, origin)
    elif isinstance(data.get("policies"), Mapping):
        others = sorted(str(key) for key in data if key not in ("default", "policies"))
        if others:  # (a name beside "policies" would be dropped)
            raise PasaError(f"plan: {origin}: {', '.join(repr(k) for k in others)} beside 'policies': give every "
                            f"call's policy inside 'policies'")
        default, table = data.get("default"), data["policies"]
    else:
        default, table = data.get("default"), {k: v for k, v in data.items() if k != "default"}

    def checked(name: str, policy: Any) -> str:
        if not isinstance(policy, (str, Policy)):
            raise PasaError(f"plan: entry {name!r}: expected a policy text, got "
                            f"{type(policy).__name__}")
        try:
            return str(Policy(policy))
        except PasaError as error:
            raise PasaError(f"plan: entry {name!r}: {error}") from None

    return (None if default is None else checked("default", default),
            {str(name): checked(str(name), policy) for name, policy in table.items()})


class Patch:
    """Routes a module's SDPA calls through :func:`pasa.sdpa`; see :func:`patch`."""

    def __init__(self, module: Any, *, policy: Optional[PolicyLike] = None,
                 plan: Any = None, name_fn: Optional[NameFn] = None,
                 strict: bool = False) -> None:
        torch = _require_torch("pasa.patch")
        if not isinstance(module, torch.nn.Module):
            raise PasaError(f"module: expected a torch.nn.Module, got {type(module).__name__}")
        if policy is not None and plan is not None:
            raise PasaError("plan: give policy= or plan=, not both")
        if name_fn is not None and not callable(name_fn):
            raise PasaError(f"name_fn: expected a callable CallInfo -> str, got "
                            f"{type(name_fn).__name__}")
        self.policy: Optional[str] = None
        if plan is None:
            self.policy = str(Policy(policy if policy is not None else "exact"))
        self.plan: Optional[Dict[str, str]] = None
        self.plan_default: Optional[str] = None
        if plan is not None:
            self.plan_default, self.plan = _load_plan(plan)
        for text in {self.policy, self.plan_default, *(self.plan or {}).values()} - {None}:
            warm_score_mods(text)
        self.timestep: Optional[int] = None  #: set by the caller; passed to name_fn
        self.calls = 0  #: calls routed through pasa
        self.fallbacks = 0  #: calls pasa cannot run, passed to torch's SDPA (see pasa.stats())
        self._index = 0
        self._name_fn: NameFn = name_fn or default_name
        self._strict = flag_argument(strict, "strict")
        self._functional = torch.nn.functional
        self._tracker = _LayerTracker(module) if plan is not None or name_fn is not None else None
        self._handles = [
            module.register_forward_pre_hook(self._enter),
            module.register_forward_hook(self._exit, always_call=True),
        ]
        _router_acquire(self._functional)
        self._removed = False

    def _enter(self, module: Any, args: Any) -> None:
        stack = _active_patches()
        # Already on the stack: the module's forward calls the module again (recursion, whose outer
        # forward is running still: each level keeps its entry), or an entry left by a forward that a
        # KeyboardInterrupt stopped (torch runs always_call hooks on Exception only), removed with
        # what was entered after it.
        if self in stack and not _forward_running(module):
            del stack[stack.index(self):]
        stack.append(self)

    def _exit(self, module: Any, args: Any, output: Any) -> None:
        # (Its own entry, wherever it is: two patches of one module exit in the order they entered.)
        stack = _active_patches()
        for i in range(len(stack) - 1, -1, -1):
            if stack[i] is self:
                del stack[i]
                break

    def reset(self) -> None:
        """Restarts call numbering at 0 (e.g. before each generation, to match a capture's)."""
        self._index = 0

    def __deepcopy__(self, memo: Any) -> Patch:
        return self  # (a model copied with its hooks, an EMA copy say, is routed by this patch too)

    def __copy__(self) -> Patch:
        return self  # (the handle of one patch: a copy of it would route nothing, __reduce__ below)

    def __reduce__(self) -> Any:
        return (_saved_hooks, ())  # (a model saved whole: see _SavedHooks)

    def policy_for(self, call: CallInfo) -> str:
        """The policy text for a call: the fixed policy, or the plan's entry for its name."""
        if self.plan is None:
            assert self.policy is not None
            return self.policy
        name = _check_name(self._name_fn(call), call)
        # A (layer, timestep) entry, else the layer's timestep-free entry, else the default.
        policy = self.plan.get(name)
        timestep_free = _TIMESTEP_SUFFIX.sub("", name)
        if policy is None and timestep_free != name:
            policy = self.plan.get(timestep_free)
        if policy is None:
            policy = self.plan_default
        if policy is None:
            raise PasaError(f"plan: no policy for call {name!r} (layer {call.layer!r}, timestep "
                            f"{call.timestep!r}) and no 'default' entry")
        return policy

    def _call(self, args: Tuple[Any, ...], kwargs: Mapping[str, Any]) -> Any:
        bound = _bind(args, kwargs)
        if bound is None:
            return _router_original(*args, **kwargs)
        # A policy that names no call (one policy, or a plan of only a default) reads neither the
        # numbering nor the timestep: under torch.compile a read of either is a guard on its value,
        # and every step would recompile. (Nor does a traced call count: see compiling().)
        tracing = compiling()
        fixed = self.policy if self.plan is None else (None if self.plan else self.plan_default)
        if fixed is None or not tracing:
            self._index += 1
        if fixed is None:
            policy = self.policy_for(CallInfo(index=self._index - 1,
                                              layer=self._tracker.current() if self._tracker else None,
                                              timestep=_plain_timestep(self.timestep)))
        else:
            policy = fixed
        routed = []

        def run() -> Any:
            result = sdpa(bound["query"], bound["key"], bound["value"],
                          attn_mask=bound.get("attn_mask"), dropout_p=bound.get("dropout_p", 0.0),
                          is_causal=bound.get("is_causal", False), scale=bound.get("scale"),
                          enable_gqa=bound.get("enable_gqa", False), policy=policy)
            routed.append(True)
            return result

        precheck = sdpa_precheck(bound.get("query"), bound.get("key"), bound.get("value"),
                                 bound.get("attn_mask"), bound.get("dropout_p", 0.0),
                                 bound.get("enable_gqa", False), bound.get("scale"))
        if precheck is None:
            precheck = score_mods_refusal(policy, bound["query"],
                                          "attn_mask" if bound.get("attn_mask") is not None else None)
        fell_back = []

        def fallback() -> Any:
            fell_back.append(True)
            return _router_original(*args, **kwargs)

        try:
            return run_or_fallback(run, fallback, precheck, self._strict)
        finally:  # (counted as pasa.stats() counts them, also where torch's own call then raised)
            if not tracing:
                self.calls += len(routed)
                self.fallbacks += len(fell_back)

    def remove(self) -> None:
        """Stops routing: removes the hooks and, with the last patch, restores torch's SDPA."""
        if self._removed:
            return
        self._removed = True  # (_router drops it where an interrupted forward left it on a stack)
        for handle in self._handles:
            handle.remove()
        if self._tracker is not None:
            self._tracker.remove()
        _router_release(self._functional)

    def __enter__(self) -> Patch:
        if self._removed:  # (its hooks are gone: a with block would route nothing)
            raise PasaError("patch: this patch was removed (remove() or the end of its with block) and routes "
                            "nothing; make a new one with pasa.patch(...)")
        return self

    def __exit__(self, *exc: Any) -> None:
        self.remove()

    def __repr__(self) -> str:
        what = (f"policy={self.policy!r}" if self.plan is None
                else f"plan of {len(self.plan)} entries")
        return f"<pasa.Patch {what}, {self.calls} calls, {self.fallbacks} fallbacks>"


def patch(module: Any, *, policy: Optional[PolicyLike] = None, plan: Any = None,
          name_fn: Optional[NameFn] = None, strict: bool = False) -> Patch:
    """Routes the scaled_dot_product_attention calls made inside ``module``'s forward through
    :func:`pasa.sdpa`, until ``.remove()`` (or the end of a ``with`` block).

    Args:
        module: a ``torch.nn.Module``; calls made while its forward runs (in that thread) are
            routed.
        policy: one policy for every call (text or :class:`Policy`; default ``"exact"``).
        plan: instead of ``policy``, a policy per call: a mapping ``{call name: policy}`` with an
            optional ``"default"`` entry, or ``{"default": ..., "policies": {...}}``, or the path of
            a JSON file holding either. Call names come from ``name_fn`` exactly as in
            :func:`capture` (default ``layer0``, ``layer1``, ... counted from the patch or its last
            ``reset()``); a name without an entry and no default raises PasaError.
        name_fn: ``CallInfo -> str``, as for :func:`capture`.
        strict: raise :class:`PasaError` for a call pasa cannot run. By default such a call
            (``dropout_p > 0``, autograd, an unsupported dtype, head dim or policy on the GPU, a
            mask with a policy whose GPU kernel lacks it, ...) runs torch's own SDPA instead, with a
            :class:`PasaFallbackWarning` once per reason; it is counted in ``.fallbacks`` and in
            :func:`pasa.stats`.

    Returns a :class:`Patch` (also a context manager) with ``timestep``, ``reset()``, ``calls``,
    ``fallbacks`` and ``remove()``.
    """
    return Patch(module, policy=policy, plan=plan, name_fn=name_fn, strict=strict)
