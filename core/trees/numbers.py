"""The numbers of the tree grammar (:mod:`core.trees.spec`): ASCII digits, one spelling per value.

Python's ``int()`` and ``float()`` also take ``+7``, ``1_0`` and other scripts' digits (``int("\\u0663")``
is 3), so a spec read with them could be stored under several spellings of one tree. These parsers take
an optional minus sign and ASCII digits only; spaces or tabs around a number and leading zeros are
harmless and dropped by the canonical spec (``str`` of the policy), anything else is refused.
"""

from __future__ import annotations

import re

_BLANKS = " \t"  # the harmless whitespace around a number
_INT = re.compile(r"-?[0-9]+")
_FLOAT = re.compile(r"-?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE]-?[0-9]+)?")


def spec_int(text: str, what: str) -> int:
    """``text`` as an int written ``-?[0-9]+`` (around it: spaces or tabs), else a ``ValueError`` naming
    ``what`` (the form the user wrote, e.g. ``"eagle2:K,D,M"``)."""
    body = text.strip(_BLANKS)
    if not _INT.fullmatch(body):
        raise ValueError(f"values must be integers in ASCII digits with an optional minus sign ({what}), "
                         f"got {text!r}")
    return int(body)


def spec_float(text: str, what: str) -> float:
    """``text`` as a float in ASCII decimal notation (``-0.3``, ``1e-2``; no ``+``, ``_``, ``inf`` or
    ``nan``), else a ``ValueError`` naming ``what``."""
    body = text.strip(_BLANKS)
    if not _FLOAT.fullmatch(body):
        raise ValueError(f"{what} must be a decimal number in ASCII digits with an optional minus sign, "
                         f"got {text!r}")
    return float(body)
