"""Issue 23, item 6: no API answer shows a zero-width "95%" interval. ``assert_no_zero_width``
walks a JSON answer and fails on any interval-like value whose ends are equal: a two-number list
under a key containing ``interval`` or ``bounds``, or an object with equal ``lower``/``upper``."""

from __future__ import annotations

from typing import Any


def zero_width(obj: Any, path: str = "$") -> list[str]:
    found: list[str] = []
    if isinstance(obj, dict):
        if {"lower", "upper"} <= obj.keys() and obj["lower"] is not None and obj["lower"] == obj["upper"]:
            found.append(path)
        for k, v in obj.items():
            if ("interval" in k or "bounds" in k) and isinstance(v, list) and len(v) == 2 \
                    and all(isinstance(x, (int, float)) for x in v) and v[0] == v[1]:
                found.append(f"{path}.{k}")
            found += zero_width(v, f"{path}.{k}")
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            found += zero_width(v, f"{path}[{i}]")
    return found


def assert_no_zero_width(*answers: Any) -> None:
    for answer in answers:
        bad = zero_width(answer)
        assert not bad, f"zero-width intervals at {bad}"
