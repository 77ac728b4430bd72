# SPDX-License-Identifier: Apache-2.0
"""``pasa.Policy``: the precision policy of an attention call, as data.

A policy gives the number format at every rounding point of the online-softmax loop, where the
softmax scale multiplies in, the shift (none or PASA's pseudo-average with ``beta``) and the block
sizes. Named methods are presets; text such as ``"pasa,beta=0.968994,s2=64"`` is a preset plus the
fields that differ from it (see ``docs/algorithms.md`` section 2).
"""

from __future__ import annotations

import functools
from typing import Any, Dict, List, Union

from . import _core
from ._errors import PasaError

__all__ = ["Policy", "PolicyLike"]


class Policy:
    """A precision policy (immutable).

    ``Policy("pasa")``, ``Policy.parse("fa16,s2=64")`` and ``Policy.preset("exact")`` build one;
    ``str(policy)`` is the canonical text, which parses back to an equal policy. Every field is
    read-only; :meth:`replace` makes a modified copy.

    Fields (text keys in brackets): ``preset``; the formats ``input``, ``qk_acc``, ``s``,
    ``softmax``, ``p``, ``pv_acc``, ``o`` (names such as ``"fp32"``, ``"fp16"``, ``"bf16"``,
    ``"e4m3"``, ``"e8m13"``); ``scale_placement`` (``"scores"``, ``"query"`` or ``"key"``) [scale];
    ``shift`` (``"none"`` or ``"pasa"``); ``beta``; ``block_q`` [s1] and ``block_kv`` [s2].
    """

    __slots__ = ("_impl", "_text")
    _impl: Any  # the _core.Policy
    _text: str  # its canonical text

    def __init__(self, text: PolicyLike = "exact") -> None:
        if isinstance(text, Policy):
            impl = text._impl
        elif isinstance(text, str):
            impl = _parse(text)
        else:
            raise PasaError(
                f"policy: expected policy text such as 'pasa' or 'fa16,s2=64', or a pasa.Policy; "
                f"got {type(text).__name__}"
            )
        self._impl = impl
        self._text = impl.to_string()

    @classmethod
    def parse(cls, text: str) -> Policy:
        """Parses policy text: a preset name, then ``key=value`` fields separated by commas."""
        return cls(text)

    @classmethod
    def preset(cls, name: str) -> Policy:
        """The preset ``name`` (one of :meth:`presets`)."""
        if not isinstance(name, str):
            raise PasaError(f"name: expected a preset name, got {type(name).__name__}")
        policy = cls.__new__(cls)
        policy._impl = _core.Policy.from_preset(name)
        policy._text = policy._impl.to_string()
        return policy

    @staticmethod
    def presets() -> List[str]:
        """The preset names, e.g. ``['exact', 'fa16_fp32', 'fa16', 'pasa']``."""
        return list(_core.Policy.preset_names())

    def replace(self, **fields: Any) -> Policy:
        """A copy with the given text keys changed, e.g. ``policy.replace(beta=0.97, s2=64)``."""
        text = self._text + "".join(f",{key}={value}" for key, value in fields.items())
        return Policy(text)

    def to_dict(self) -> Dict[str, Any]:
        """Every field by name (the attribute names of this class)."""
        return {name: getattr(self, name) for name in _FIELDS}

    preset_name = property(lambda self: self._impl.preset,
                           doc="The preset this policy derives from.")
    input = property(lambda self: self._impl.input, doc="Format Q, K, V are converted to on entry.")
    qk_acc = property(lambda self: self._impl.qk_acc,
                      doc="Accumulator format inside the Q K^T GEMM.")
    s = property(lambda self: self._impl.s, doc="Format of S as it leaves the Q K^T GEMM.")
    scale_placement = property(
        lambda self: self._impl.scale_placement,
        doc="Where the softmax scale multiplies in: 'scores', 'query' or 'key'.",
    )
    softmax = property(lambda self: self._impl.softmax, doc="Format of the softmax arithmetic.")
    p = property(lambda self: self._impl.p, doc="Format of P as the P V GEMM's operand.")
    pv_acc = property(lambda self: self._impl.pv_acc, doc="Accumulator format inside the P V GEMM.")
    o = property(lambda self: self._impl.o, doc="Format of the output and the running O~.")
    shift = property(lambda self: self._impl.shift, doc="'none' or 'pasa' (pseudo-average shift).")
    beta = property(lambda self: self._impl.beta, doc="PASA's beta in [0, 1).")
    block_q = property(lambda self: self._impl.block_q, doc="Query rows per block (s1).")
    block_kv = property(lambda self: self._impl.block_kv, doc="Key rows per block (s2).")

    def __str__(self) -> str:
        return self._text

    def __repr__(self) -> str:
        return f"pasa.Policy({self._text!r})"

    def __eq__(self, other: object) -> bool:
        if isinstance(other, str):
            try:
                other = Policy(other)
            except PasaError:
                return False
        if not isinstance(other, Policy):
            return NotImplemented
        return bool(self._impl == other._impl)

    def __hash__(self) -> int:
        return hash(tuple(self.to_dict()[name] for name in _FIELDS if name != "preset_name"))

    def __reduce__(self) -> Any:
        return (Policy, (self._text,))


_FIELDS = ("preset_name", "input", "qk_acc", "s", "scale_placement", "softmax", "p", "pv_acc", "o",
           "shift", "beta", "block_q", "block_kv")

#: What every ``policy=`` argument accepts: policy text or a :class:`Policy`.
PolicyLike = Union[str, Policy]


@functools.lru_cache(maxsize=512)
def _parse(text: str) -> Any:
    return _core.Policy.parse(text)


def core_policy(policy: PolicyLike) -> Any:
    """The ``_core.Policy`` for a ``policy=`` argument (parsed text is cached)."""
    if isinstance(policy, Policy):
        return policy._impl
    if isinstance(policy, str):
        return _parse(policy)
    raise PasaError(
        f"policy: expected policy text such as 'pasa' or 'fa16,s2=64', or a pasa.Policy; "
        f"got {type(policy).__name__}"
    )


def policy_text(policy: PolicyLike) -> str:
    """Text for a ``policy=`` argument, without parsing it (the torch op parses at run time)."""
    if isinstance(policy, Policy):
        return policy._text
    if isinstance(policy, str):
        return policy
    raise PasaError(
        f"policy: expected policy text such as 'pasa' or 'fa16,s2=64', or a pasa.Policy; "
        f"got {type(policy).__name__}"
    )
