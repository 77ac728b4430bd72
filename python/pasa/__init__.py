# SPDX-License-Identifier: Apache-2.0
"""pasa: fast, robust low-precision attention.

NumPy arrays run on the CPU backends (a bit-faithful emulator of every precision policy), CUDA
tensors on the kernels (where the build has them). The extension takes any DLPack array (NumPy,
torch, CuPy, JAX) and links no torch; torch integration (a custom op for torch.compile and CUDA
graphs, a drop-in for scaled_dot_product_attention, capture and patching of models) is pure Python.

    import numpy as np, pasa
    q, k, v = (np.random.randn(1, 8, 256, 64).astype(np.float32) for _ in range(3))
    o = pasa.attention(q, k, v, policy="pasa", causal=True)
    print(np.abs(o - pasa.reference(q, k, v, causal=True)).max())
"""

from __future__ import annotations

import sys

from . import _core
from ._api import attention, reference, sdpa
from ._beta import BetaSolution, beta
from ._capture import CallInfo, Capture, Patch, capture, default_name, patch
from ._errors import PasaError
from ._fallback import PasaFallbackWarning, stats
from ._io import load, save
from ._policy import Policy, PolicyField, PolicyLike
from ._serving import attention_with_kvcache

__version__: str = _core.__version__
#: True when this build has the CUDA kernels (nvcc was found when it was built).
built_with_cuda: bool = bool(_core.built_with_cuda)

__all__ = [
    "attention",
    "attention_with_kvcache",
    "sdpa",
    "reference",
    "Policy",
    "PolicyLike",
    "beta",
    "BetaSolution",
    "PasaError",
    "PasaFallbackWarning",
    "stats",
    "PolicyField",
    "load",
    "save",
    "capture",
    "patch",
    "Capture",
    "Patch",
    "CallInfo",
    "default_name",
    "built_with_cuda",
    "__version__",
]

# The torch custom ops must exist before torch.compile traces a call (registering them inside a
# traced frame breaks Dynamo's guards): now when torch is already imported, else right after torch's
# own import (_torch_import_hook).
if "torch" in sys.modules:
    from . import _torch  # noqa: F401
else:
    from ._torch_import_hook import register_ops_after_torch_import

    register_ops_after_torch_import()
