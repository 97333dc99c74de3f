"""Segments a trial is read by (issue 27): which values an exchange falls in, and the cap. Pure.

A trial created with ``segments = ["route", "tag:tier", ...]`` is also read per *segment value*
(``route=/chat``, ``tag:tier=reasoning``). What a segment reads is metadata the exchange
already carries, never content:

- ``route``, ``model`` (the served model), ``gateway``: fields of the exchange;
- ``tag:NAME``: the gateway-supplied tag ``NAME`` (``tags`` on the wire);
- ``length``: a bucket of the prompt's length in characters (:func:`length_bucket`),
  computed when the case is claimed; the prompt itself is never kept for it.

A trial tracks at most ``segment_cap`` values over all its segments, the first ones seen; a
case with any value beyond the cap is pooled into the one ``other`` group (:func:`assign`). So
an adversarial tag with a new value per request grows neither memory nor storage past the
cap, and the number of groups read is at most ``segment_cap + 1``: the number the trial's
error level is split over (:func:`policies.segment_alpha.segment_alpha`).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence

#: Segments read from the exchange's own fields, and the content-free length bucket.
FIELD_SEGMENTS: tuple[str, ...] = ("route", "model", "gateway", "length")
TAG_PREFIX = "tag:"
#: The group every case with a value beyond the cap is pooled into.
OTHER = "other"
#: The value of a field or tag the exchange does not carry.
UNSET = "(unset)"

DEFAULT_CAP = 16
MIN_CAP = 1
MAX_CAP = 64
#: Segments one trial may be read by.
MAX_SEGMENTS = 8
#: Tags on one exchange, and the longest tag name and value (the tap refuses more).
MAX_TAGS = 16
MAX_TAG_KEY_CHARS = 64
MAX_TAG_VALUE_CHARS = 128

#: The length buckets: (below this many characters, label); longer prompts read ``16k+``.
LENGTH_BUCKETS: tuple[tuple[int, str], ...] = ((256, "<256"), (1024, "<1k"), (4096, "<4k"), (16384, "<16k"))
LONGEST_BUCKET = "16k+"


def check_segments(segments: Sequence[str]) -> tuple[int, str] | None:
    """The first problem with a trial's ``segments`` as ``(index, message)``; None when fine
    (index -1: the list as a whole)."""
    if len(segments) > MAX_SEGMENTS:
        return -1, f"at most {MAX_SEGMENTS} segments, got {len(segments)}"
    seen: set[str] = set()
    for i, name in enumerate(segments):
        if name in seen:
            return i, f"segment {name!r} is listed twice"
        seen.add(name)
        if name in FIELD_SEGMENTS:
            continue
        if name.startswith(TAG_PREFIX):
            tag = name[len(TAG_PREFIX):]
            if not 1 <= len(tag) <= MAX_TAG_KEY_CHARS or not tag.isprintable() or tag != tag.strip():
                return i, (f"a tag segment is tag:NAME, NAME 1 to {MAX_TAG_KEY_CHARS} printable characters "
                           "without whitespace at either end")
            continue
        allowed = ", ".join(repr(s) for s in FIELD_SEGMENTS)
        return i, f"unknown segment {name!r}: one of {allowed} or 'tag:NAME'"
    return None


def check_cap(cap: int) -> str | None:
    """What is wrong with ``segment_cap`` (None: fine)."""
    if not MIN_CAP <= cap <= MAX_CAP:
        return f"segment_cap is {MIN_CAP} to {MAX_CAP} values, got {cap}"
    return None


def check_tags(tags: Mapping[str, str]) -> str | None:
    """What is wrong with an exchange's ``tags`` (None: fine)."""
    if len(tags) > MAX_TAGS:
        return f"at most {MAX_TAGS} tags, got {len(tags)}"
    for key, value in tags.items():
        if not 1 <= len(key) <= MAX_TAG_KEY_CHARS:
            return f"a tag name is 1 to {MAX_TAG_KEY_CHARS} characters"
        if len(value) > MAX_TAG_VALUE_CHARS:
            return f"tag {key[:MAX_TAG_KEY_CHARS]!r}: a value is at most {MAX_TAG_VALUE_CHARS} characters"
    return None


def length_bucket(chars: int) -> str:
    """The bucket of a prompt of ``chars`` characters (the prompt is never needed, only its length)."""
    for limit, label in LENGTH_BUCKETS:
        if chars < limit:
            return label
    return LONGEST_BUCKET


def segment_values(
    segments: Sequence[str],
    *,
    route: str | None,
    model: str,
    gateway: str,
    tags: Mapping[str, str],
    prompt_chars: int,
) -> tuple[tuple[str, str], ...]:
    """The (segment, value) of an exchange for each of ``segments``, in their order."""
    out: list[tuple[str, str]] = []
    for name in segments:
        if name == "route":
            value = route or UNSET
        elif name == "model":
            value = model or UNSET
        elif name == "gateway":
            value = gateway or UNSET
        elif name == "length":
            value = length_bucket(prompt_chars)
        else:
            value = tags.get(name[len(TAG_PREFIX):]) or UNSET
        out.append((name, value))
    return tuple(out)


def segment_key(segment: str, value: str) -> str:
    """The key a segment value is known by (``tag:tier=reasoning``)."""
    return f"{segment}={value}"


def assign(
    values: Sequence[tuple[str, str]], tracked: Collection[str], cap: int
) -> tuple[tuple[str, ...], tuple[tuple[str, str, str], ...]]:
    """Which groups a case falls in, given the keys its trial already ``tracked``.

    Returns the case's keys (tracked ones, then :data:`OTHER` once if any value is beyond the
    cap) and the values newly tracked by it, as ``(key, segment, value)``, at most
    ``cap - len(tracked)`` of them: the first ``cap`` distinct values seen are tracked."""
    keys: list[str] = []
    new: list[tuple[str, str, str]] = []
    pooled = False
    for segment, value in values:
        key = segment_key(segment, value)
        if key in keys:
            continue
        if key in tracked:
            keys.append(key)
        elif len(tracked) + len(new) < cap:
            new.append((key, segment, value))
            keys.append(key)
        else:
            pooled = True
    if pooled:
        keys.append(OTHER)
    return tuple(keys), tuple(new)


#: Tags LiteLLM adds to every request itself (``User-Agent: curl/8.1``): not the request's own.
GATEWAY_ADDED_PREFIX = "User-Agent:"


def tags_from_labels(labels: Sequence[object], key_alias: object = None) -> tuple[dict[str, str], int]:
    """A gateway's tag list (LiteLLM's ``request_tags``: ``["tier:reasoning", "beta"]``) and its
    key's alias as the wire's ``tags`` map, within the tap's bounds, and how many were cut.

    ``NAME:VALUE`` (or ``NAME=VALUE``) becomes ``{NAME: VALUE}``; bare labels are joined,
    sorted, under ``tags``; the alias is ``key_alias``. Over-long names and values are cut
    to the bounds and extra tags dropped (so a gateway never has a batch refused for them),
    each counted in the second item for the caller to report."""
    out: dict[str, str] = {}
    bare: list[str] = []
    cut = 0
    for label in labels:
        if not isinstance(label, str) or not label or label.startswith(GATEWAY_ADDED_PREFIX):
            continue
        name, sep, value = label.partition(":")
        if not sep:
            name, sep, value = label.partition("=")
        if not sep or not name.strip():
            bare.append(label)
            continue
        name, value = name.strip(), value.strip()
        long = len(name) > MAX_TAG_KEY_CHARS or len(value) > MAX_TAG_VALUE_CHARS
        name = name[:MAX_TAG_KEY_CHARS]
        if name in out or len(out) >= MAX_TAGS - 2:  # room kept for ``tags`` and ``key_alias``
            cut += 1
            continue
        cut += long
        out[name] = value[:MAX_TAG_VALUE_CHARS]
    if bare:
        joined = ",".join(sorted(set(bare)))
        if len(joined) > MAX_TAG_VALUE_CHARS:
            cut += 1
        out["tags"] = joined[:MAX_TAG_VALUE_CHARS]
    if isinstance(key_alias, str) and key_alias:
        if len(key_alias) > MAX_TAG_VALUE_CHARS:
            cut += 1
        out["key_alias"] = key_alias[:MAX_TAG_VALUE_CHARS]
    return out, cut
