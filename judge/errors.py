"""Errors of the judge package: programming and configuration mistakes only.

A judge call that fails, times out or answers without a usable label is an
*expected remote outcome*; it comes back as a value
(:class:`judge.paired.PairedJudgment` with ``outcome="error"``), never as an
exception. The classes below are raised only when the caller asked for
something that cannot work, so they should surface at start-up or in tests::

    JudgeError
     ├── UnknownRubric              (also LookupError)  rubric id not in the registry
     ├── InvalidJudgeSpec           (also ValueError)   empty model, max_tokens < 1, …
     │    └── UnsupportedParserVersion                  spec names a parser this code lacks
     ├── InvalidOrderKey            (also ValueError)   order/audit hash key empty or > 64 bytes
     └── InvalidArgument            (also ValueError)   bad order value, audit share outside [0, 1]
"""

from __future__ import annotations


class JudgeError(Exception):
    """Base of every exception the judge package raises on purpose."""


class UnknownRubric(JudgeError, LookupError):
    """The rubric id is not in :data:`judge.rubric.RUBRICS`."""


class InvalidJudgeSpec(JudgeError, ValueError):
    """A :class:`judge.version.JudgeSpec` that no judge can run."""


class UnsupportedParserVersion(InvalidJudgeSpec):
    """The spec pins a label-parser version other than the one this code implements."""


class InvalidOrderKey(JudgeError, ValueError):
    """The key for the order/audit hash is empty or longer than BLAKE2b allows (64 bytes)."""


class InvalidArgument(JudgeError, ValueError):
    """An argument outside its domain (an unknown order, an audit share outside [0, 1])."""
