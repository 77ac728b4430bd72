# SPDX-License-Identifier: Apache-2.0
"""pasa's torch custom ops registered as soon as torch is imported after pasa (``import pasa`` before
``import torch``, the order isort gives): registered later, by the first call, they would be
registered inside the frame torch.compile traces, which breaks its guards."""

from __future__ import annotations

import importlib.abc
import importlib.util
import sys
import threading
from typing import Any, Optional, Sequence


class _AfterTorch(importlib.abc.MetaPathFinder):
    """Finds torch as the other finders do, and has its loader import pasa._torch once torch's module
    has run. It stays until then: a lookup of torch that imports nothing (importlib.util.find_spec,
    as transformers' is_torch_available calls it) leaves it in place for the import."""

    def __init__(self) -> None:
        self._finding = threading.local()  # (this thread's own lookup below, which it must not answer)

    def find_spec(self, name: str, path: Optional[Sequence[str]], target: Any = None) -> Any:
        if name != "torch" or "torch" in sys.modules or getattr(self._finding, "on", False):
            return None
        self._finding.on = True
        try:
            spec = importlib.util.find_spec("torch")
        finally:
            self._finding.on = False
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        run_torch = spec.loader.exec_module

        def exec_module(module: Any) -> None:
            run_torch(module)
            if self in sys.meta_path:
                sys.meta_path.remove(self)
            try:
                from . import _torch  # noqa: F401 (registers the ops)
            except Exception:  # (a torch pasa cannot use: torch imports as ever, pasa.attention says why)
                pass

        spec.loader.exec_module = exec_module  # (the loader is this spec's own: a file finder makes one each)
        return spec


def register_ops_after_torch_import() -> None:
    if not any(isinstance(finder, _AfterTorch) for finder in sys.meta_path):
        sys.meta_path.insert(0, _AfterTorch())
