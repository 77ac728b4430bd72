# SPDX-License-Identifier: Apache-2.0
"""``pasa.Policy``: the precision policy of an attention call, as data.

A policy gives the number format at every rounding point of the online-softmax loop, where the
softmax scale multiplies in, the shift (none, PASA's pseudo-average with ``beta``, or
FlashDecoding++'s unified maximum), SageAttention2's smoothing and quantizers, and the block sizes.
Named methods are presets; text such as ``"pasa,beta=0.968994,s2=64"`` is a preset plus the fields
that differ from it (see ``docs/algorithms.md`` section 2).

The fields, their names, types and allowed values are not listed here: they come from the C++
policy table (``_core.policy_fields()``), so Python and C++ cannot disagree.
"""

from __future__ import annotations

import functools
from typing import Any, Dict, List, Mapping, NamedTuple, Tuple, Union

import numpy as np

from . import _core
from ._errors import PasaError, text_argument

__all__ = ["Policy", "PolicyLike", "PolicyField"]


class PolicyField(NamedTuple):
    """One field of a policy, as the C++ table describes it."""

    key: str  #: the text key and the attribute name, e.g. ``"s2"``
    kind: str  #: "format", "quantizer" (a format or None), "choice", "number", "integer", "boolean"
    choices: Tuple[str, ...]  #: the allowed values of a "choice" field
    doc: str


_FIELDS: Tuple[PolicyField, ...] = tuple(
    PolicyField(key, kind, tuple(choices), doc) for key, kind, choices, doc in _core.policy_fields())


def _to_python(kind: str, text: str) -> Any:
    """A field's value from its canonical text."""
    if kind == "number":
        return float(text)
    if kind == "integer":
        return int(text)
    if kind == "boolean":
        return text == "1"
    if kind == "quantizer" and text == "none":
        return None
    return text


def _to_text(kind: str, value: Any) -> str:
    """A field's text from a Python value (the inverse of _to_python)."""
    if kind == "boolean" and isinstance(value, (bool, np.bool_)):
        return "1" if value else "0"
    if kind == "quantizer" and value is None:
        return "none"
    if kind == "number" and isinstance(value, (float, np.floating)):
        return repr(float(value))  # (NumPy 2's repr of its scalars is "np.float64(0.5)")
    return str(value)


class Policy:
    """A precision policy (immutable).

    ``Policy("pasa")``, ``Policy.parse("fa16,s2=64")`` and ``Policy.preset("exact")`` build one;
    ``str(policy)`` is the canonical text, which parses back to an equal policy. Every field is a
    read-only attribute named by its text key (``policy.s2``, ``policy.shift``, ``policy.pv_acc``);
    :meth:`fields` lists them with their kinds and allowed values; :meth:`replace` makes a modified
    copy; :meth:`to_dict` / :meth:`from_dict` convert to and from a plain dict. Policies compare and
    hash by their fields (not by the preset they were written from); a policy never equals a str:
    compare ``Policy(text)`` or ``str(policy)``.
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
        policy._impl = _core.Policy.from_preset(text_argument(name, "name"))
        policy._text = policy._impl.to_string()
        return policy

    @staticmethod
    def presets() -> List[str]:
        """The preset names, e.g. ``['exact', 'fa16_fp32', 'fa16', 'pasa', ...]``."""
        return list(_core.Policy.preset_names())

    @staticmethod
    def fields() -> Tuple[PolicyField, ...]:
        """Every field (key, kind, allowed values, description), in printing order."""
        return _FIELDS

    @property
    def preset_name(self) -> str:
        """The preset this policy derives from (the first word of its text)."""
        return str(self._impl.preset)

    def replace(self, **fields: Any) -> Policy:
        """A copy with the given fields changed, e.g. ``policy.replace(beta=0.97, s2=64)``."""
        kinds = {f.key: f.kind for f in _FIELDS}
        # The canonical text is the preset and its changed fields; a key may appear once in a text.
        preset, *pairs = self._text.split(",")
        values = dict(pair.split("=", 1) for pair in pairs)
        for key, value in fields.items():
            text = _to_text(kinds.get(key, ""), value)
            if "," in text or "=" in text:  # it would set other fields than `key`
                raise PasaError(f"{key}: {value!r} is not one value of the field")
            values[key] = text
        return type(self)(",".join([preset] + [f"{key}={value}" for key, value in values.items()]))

    def to_dict(self) -> Dict[str, Any]:
        """``{"preset": name, key: value, ...}`` for every field (floats, ints, bools, strings and
        None for an absent quantizer); :meth:`from_dict` turns it back into an equal policy."""
        out: Dict[str, Any] = {"preset": self.preset_name}
        for f in _FIELDS:
            out[f.key] = _to_python(f.kind, self._impl.get(f.key))
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Policy:
        """The policy a :meth:`to_dict` result (or any subset of it with ``"preset"``) describes."""
        if not isinstance(data, Mapping) or "preset" not in data:
            raise PasaError("data: expected a mapping with a 'preset' entry (what to_dict returns)")
        rest = {key: value for key, value in data.items() if key != "preset"}
        return cls.preset(data["preset"]).replace(**rest)

    def __getattr__(self, name: str) -> Any:
        # Only reached for names that are not slots or methods: the fields.
        if name in _KINDS:
            return _to_python(_KINDS[name], self._impl.get(name))
        raise AttributeError(f"pasa.Policy has no field {name!r} (fields: "
                             f"{', '.join(f.key for f in _FIELDS)})")

    def __setattr__(self, name: str, value: Any) -> None:
        # (Policy's own slots once, at construction; a subclass's own attributes are its business)
        if name in Policy.__slots__:
            if not hasattr(self, name):
                object.__setattr__(self, name, value)
                return
        elif name not in _KINDS and hasattr(self, "__dict__"):
            object.__setattr__(self, name, value)
            return
        raise AttributeError(f"pasa.Policy is immutable; use policy.replace({name}=...)")

    def __delattr__(self, name: str) -> None:
        # (deleting a slot would let it be set again: a text that says another policy than the fields)
        raise AttributeError(f"pasa.Policy is immutable: {name} cannot be deleted")

    def __dir__(self) -> List[str]:
        return sorted(set(object.__dir__(self)) | set(_KINDS))

    def __str__(self) -> str:
        return self._text

    def __repr__(self) -> str:
        return f"pasa.Policy({self._text!r})"

    def __eq__(self, other: object) -> bool:
        # Field by field, as C++'s Policy::operator== (the preset a policy was written from does not
        # count). Never equal to a str: no hash could agree with every spelling of the same fields.
        if not isinstance(other, Policy):
            return NotImplemented
        return bool(self._impl == other._impl)

    def __hash__(self) -> int:
        # The fields' values, not their texts: -0 and 0 are equal numbers (as operator== compares them)
        # with different texts.
        return hash(tuple(_to_python(f.kind, self._impl.get(f.key)) for f in _FIELDS))

    def __format__(self, spec: str) -> str:
        return format(self._text, spec)  # (the text, as str gives it: f"{policy:>20}")

    def __reduce__(self) -> Any:
        return (type(self), (self._text,))  # (a subclass stays one; its own __init__ takes the text)


_KINDS: Dict[str, str] = {f.key: f.kind for f in _FIELDS}

#: What every ``policy=`` argument accepts: policy text or a :class:`Policy`.
PolicyLike = Union[str, Policy]


@functools.lru_cache(maxsize=512)
def _parse(text: str) -> Any:
    return _core.Policy.parse(text_argument(text, "policy"))


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
