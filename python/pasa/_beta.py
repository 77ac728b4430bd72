# SPDX-License-Identifier: Apache-2.0
"""``pasa.beta``: PASA's optimal beta for a format and block size (the paper's Appendix A-C)."""

from __future__ import annotations

import dataclasses
from typing import Optional

from . import _core
from ._errors import PasaError, int_argument, real_argument, text_argument

__all__ = ["BetaSolution", "beta"]


@dataclasses.dataclass(frozen=True)
class BetaSolution:
    """The fixed point of PASA's beta iteration."""

    initial: float  #: the starting beta
    beta: float  #: the optimal beta
    invariance: float  #: beta / (1 - beta) in fp64
    invariance_rounded: float  #: that recovery factor as stored in the format
    iterations: int  #: fixed-point iterations taken


def beta(initial: float = 1.0 - 2.0 ** -6, *, format: str = "fp16", block: int = 128,
         scale: Optional[float] = None) -> BetaSolution:
    """Solves for PASA's optimal beta.

    Rounding the shifting matrix M to ``format`` changes the shift it really applies; beta is
    optimal when the algorithm's recovery term beta / (1 - beta) equals what the rounded M
    subtracts. Solved by fixed-point iteration from ``initial`` (the default 1 - 2^-6 gives the
    ``pasa`` preset's 0.984497 for fp16 and ``block`` = s2 = 128). ``scale``, when given, is the
    softmax scale folded into M (the ``pasa`` preset's ``scale=k``); without it alpha stays out of
    M, as the paper's Table 3 assumes.
    """
    initial_value = real_argument(initial, "initial")
    block_value = int_argument(block, "block", 1, 1024)  # (the policy's range of s2, as `pasa beta` takes)
    if not isinstance(format, str):
        raise PasaError(f"format: expected a format name such as 'fp16', got "
                        f"{type(format).__name__}")
    scale_value = None if scale is None else real_argument(scale, "scale")
    result = _core.solve_beta(initial_value, text_argument(format, "format"), block_value, scale_value)
    return BetaSolution(*result)
