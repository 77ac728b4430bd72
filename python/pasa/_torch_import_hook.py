# SPDX-License-Identifier: Apache-2.0
"""pasa's torch custom ops registered as soon as torch is imported after pasa (``import pasa`` before
``import torch``, the order isort gives): registered later, by the first call, they would be
registered inside the frame torch.compile traces, which breaks its guards."""

from __future__ import annotations

import importlib.abc
import importlib.util
import sys
from typing import Any, Optional, Sequence


class _AfterTorch(importlib.abc.MetaPathFinder):
    """Finds torch as the other finders do, and imports pasa._torch once torch's module has run."""

    def find_spec(self, name: str, path: Optional[Sequence[str]], target: Any = None) -> Any:
        if name != "torch":
            return None
        sys.meta_path.remove(self)  # (once: the lookup below, and any later one, are the others')
        spec = importlib.util.find_spec("torch")
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        run_torch = spec.loader.exec_module

        def exec_module(module: Any) -> None:
            run_torch(module)
            try:
                from . import _torch  # noqa: F401 (registers the ops)
            except Exception:  # (a torch pasa cannot use: torch imports as ever, pasa.attention says why)
                pass

        spec.loader.exec_module = exec_module
        return spec


def register_ops_after_torch_import() -> None:
    if not any(isinstance(finder, _AfterTorch) for finder in sys.meta_path):
        sys.meta_path.insert(0, _AfterTorch())
