"""The exception every pasa entry point raises for bad input."""

from __future__ import annotations

from . import _core

#: Raised for bad input (shapes, dtypes, devices, files, policy text) and unsupported requests.
#: A subclass of :class:`ValueError`; the message names the offending argument or file.
PasaError = _core.PasaError
PasaError.__module__ = "pasa"
PasaError.__doc__ = (
    "Bad input or an unsupported request. A ValueError whose message names the argument or file "
    "and says what is wrong."
)

__all__ = ["PasaError"]
