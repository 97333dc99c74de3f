"""What the tap fuzz and the admin fuzz share (issue 21): invalid text, and memory readings."""

from __future__ import annotations

import resource
from collections.abc import Iterator
from contextlib import contextmanager

#: Text that is not JSON text: invalid UTF-8 (a stray byte, an overlong form, an encoded
#: surrogate, a truncated sequence, a code point past U+10FFFF) and escapes of half a
#: UTF-16 surrogate pair. Each is a whole JSON string token, quotes included.
BAD_TEXT = [b'"\xff"', b'"k\xc0\xafy"', b'"\xed\xa0\x80"', b'"ab\xe2\x82"', b'"\x80"', b'"x\\ud800"',
            b'"\\udc00y"', b'"ok\xf5\x80\x80\x80"']


def rss_bytes(pid: int | str = "self") -> int:
    with open(f"/proc/{pid}/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize()


def reset_peak(pid: int | str = "self") -> None:
    """Start a new high-water mark of the process's RSS (``VmHWM``; Linux ``clear_refs`` 5)."""
    with open(f"/proc/{pid}/clear_refs", "w") as f:
        f.write("5")


def peak_rss(pid: int | str = "self") -> int:
    """The process's peak RSS since it started or since :func:`reset_peak`."""
    with open(f"/proc/{pid}/status") as f:
        line = next(x for x in f if x.startswith("VmHWM:"))
    return int(line.split()[1]) * 1024


@contextmanager
def without_source_constants() -> Iterator[None]:
    """Hypothesis draws without the literals of our own modules (issue 29).

    Hypothesis (6.13x on) sometimes draws a literal found in the source of the "local" modules
    loaded at that moment (it parses each of them once per process, about a second of CPU for
    ours without its on-disk cache). So the fuzz's examples, and the totals they assert, hung on
    which modules the xdist worker had happened to import before: not the fixed examples of a
    fixed seed. Its own curated values (boundaries, NaN, odd text) are still drawn; ours are in
    the strategies by name. Where hypothesis has no such hook, this does nothing.
    """
    try:
        from hypothesis.internal.conjecture import providers
        from hypothesis.internal.constants_ast import Constants

        original, cache = providers._get_local_constants, providers.CONSTANTS_CACHE.cache
    except (ImportError, AttributeError):
        yield
        return
    none = Constants()
    cache.clear()  # allowed constants worked out with the local ones
    setattr(providers, "_get_local_constants", lambda: none)
    try:
        yield
    finally:
        setattr(providers, "_get_local_constants", original)
        cache.clear()
