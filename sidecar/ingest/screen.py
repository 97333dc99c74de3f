"""What the tap checks of a decoded exchange before anything else may use it.

:mod:`sidecar.ingest.wire` checks the shape; this module checks the values,
so nothing that reaches the engine can crash a case or poison the paired view.
Per field, on purpose:

- **Refused with the batch** (``400``, the path of the field, nothing of the
  batch counted): what the candidate call is built from. ``request.params.
  max_tokens`` and ``max_completion_tokens`` must be ``null`` or an integer
  from 1 to :data:`MAX_TOKENS_PARAM` (the served request could not have had
  anything else, and the reservation is computed from it); ``request.messages``
  and ``request.params`` may nest at most :data:`MAX_NESTING` levels, counting
  the exchange object as level 1 (a real conversation with tool schemas nests
  a dozen); ``tags`` at most ``MAX_TAGS`` of them, names 1 to ``MAX_TAG_KEY_CHARS``
  characters, values at most ``MAX_TAG_VALUE_CHARS`` (:mod:`policies.segments`; never
  truncated silently). A gateway sending these is misconfigured: refusing the batch, as
  for a wrong type, makes that visible instead of running half of it.
- **Excluded and counted** (the exchange is accepted, the figure is treated as
  not reported — *unknown*, never zero): the gateway's own figures, which feed
  only the paired cost and latency view, never the verdict. ``latency_ms``
  outside 0..:data:`MAX_LATENCY_MS`, ``usage.cost_usd`` outside
  0..:data:`MAX_COST_USD`, a token count outside 0..:data:`MAX_TOKEN_FIGURE`
  (any of them not finite). Each exclusion is counted by field
  (``shadowtrial_tap_figures_excluded_total{field=...}``, token aliases under
  their canonical name). A bad meter must not cost the quality evidence of a
  good exchange; an excluded cost falls back to list price × tokens, or is
  unknown.
"""

from __future__ import annotations

from collections import Counter
from itertools import compress, repeat
from operator import attrgetter
from typing import Any, Callable, Iterable, NamedTuple

import msgspec

from policies.segments import check_tags
from sidecar.ingest.wire import MAX_COST_USD, MAX_LATENCY_MS, MAX_TOKEN_FIGURE, DecodeError, Exchange, encode

#: Deepest nesting of arrays and objects allowed in an exchange's request (the exchange is level 1).
MAX_NESTING = 64
#: Largest ``max_tokens`` / ``max_completion_tokens`` accepted (a 32-bit signed integer, what providers take).
MAX_TOKENS_PARAM = 2**31 - 1

#: The figures that can be excluded, as counted (content-free label values).
FIGURES = ("cost_usd", "latency_ms", "input_tokens", "output_tokens")

_TOKEN_PARAMS = ("max_tokens", "max_completion_tokens")
#: What the JSON decoder builds for an object and an array, exactly (one set lookup per value).
_CONTAINERS = frozenset({dict, list})
# request (2) -> messages / params (3) -> a message / a parameter's value (4)
_ITEM_LEVEL = 4


class Screened(NamedTuple):
    """Exchanges fit to use, and how many figures were excluded, by field."""

    exchanges: list[Exchange]
    excluded: Counter[str]


def screen_batch(items: Iterable[tuple[str, Exchange]]) -> Screened:
    """Check every exchange of a decoded batch (with its path, from :func:`~sidecar.ingest.wire.decode_batch`).

    Raises :class:`DecodeError` naming the first refused field; otherwise returns the
    exchanges, figures out of range removed."""
    pairs = list(items)
    return screen_exchanges([ex for _, ex in pairs], lambda i: pairs[i][0])


def screen_exchanges(exchanges: list[Exchange], where: Callable[[int], str], plain: bool = False) -> Screened:
    """:func:`screen_batch` for a batch from :func:`~sidecar.ingest.wire.decode_body`: ``where(i)``
    is the path of the ``i``-th exchange, asked for only to name a refused field; ``plain``:
    the decoder found every figure within its bound and no object or array in any message or
    parameter (``Decoded.plain``).

    The tap's hot path. A plain batch whose token parameters are in range is checked in a few
    passes over the whole batch that run in C (:func:`_token_params_fit`), and only its tags
    exchange by exchange. Otherwise, per exchange, a few comparisons and type checks: an
    exchange whose request holds an object or an array inside a message or a parameter, or a
    token parameter out of range, takes the full check (:func:`_check_request`), and one with
    a figure out of range :func:`_with_sane_figures`, so every refusal, its message and its
    path, and every exclusion are theirs (the nesting limit is far above what a plain value
    can reach)."""
    if plain and _token_params_fit(exchanges):
        if any(map(_TAGS, exchanges)):
            for i in compress(range(len(exchanges)), map(_TAGS, exchanges)):
                tags_problem = check_tags(exchanges[i].tags)
                if tags_problem is not None:
                    raise DecodeError(tags_problem, f"{where(i)}.tags")
        return Screened(exchanges, Counter())
    out = exchanges
    excluded: Counter[str] = Counter()
    for i, ex in enumerate(exchanges):
        request = ex.request
        params = request.params
        plain = True
        if params:
            # bool is an int to Python, not a token count; a float is not a count either.
            max_tokens = params.get("max_tokens")
            max_completion = params.get("max_completion_tokens")
            plain = (
                (max_tokens is None or type(max_tokens) is int and 1 <= max_tokens <= MAX_TOKENS_PARAM)
                and (max_completion is None or type(max_completion) is int and 1 <= max_completion <= MAX_TOKENS_PARAM)
            )
            if plain:
                for value in params.values():
                    if type(value) in _CONTAINERS:
                        plain = False
                        break
        if plain:
            for message in request.messages:
                for value in message.values():
                    if type(value) in _CONTAINERS:
                        plain = False
                        break
                else:
                    continue
                break
        if not plain:
            _check_request(ex, where(i))
        if ex.tags:
            tags_problem = check_tags(ex.tags)
            if tags_problem is not None:
                raise DecodeError(tags_problem, f"{where(i)}.tags")
        latency = ex.latency_ms
        usage = ex.response.usage
        cost = usage.cost_usd
        if (
            (latency is None or 0 <= latency <= MAX_LATENCY_MS)
            and (cost is None or 0 <= cost <= MAX_COST_USD)
            and (usage.input_tokens is None or 0 <= usage.input_tokens <= MAX_TOKEN_FIGURE)
            and (usage.output_tokens is None or 0 <= usage.output_tokens <= MAX_TOKEN_FIGURE)
            and (usage.prompt_tokens is None or 0 <= usage.prompt_tokens <= MAX_TOKEN_FIGURE)
            and (usage.completion_tokens is None or 0 <= usage.completion_tokens <= MAX_TOKEN_FIGURE)
        ):
            continue
        if out is exchanges:
            out = list(exchanges)  # the caller's list is left as it was
        out[i] = _with_sane_figures(ex, excluded)
    return Screened(out, excluded)


_TAGS = attrgetter("tags")
_REQUEST_PARAMS = attrgetter("request.params")
#: The types a plain token parameter may have (exactly: a bool is not a count).
_TOKEN_PARAM_TYPES = frozenset({int, type(None)})


def _token_params_fit(exchanges: list[Exchange]) -> bool:
    """Whether every token parameter of the batch is null or an integer in range, in passes
    over the whole batch that run in C (no Python step per exchange); a parameter no exchange
    gives costs one pass. ``dict.get`` is mapped over the parameters with the name repeated:
    half the cost of a ``methodcaller`` per exchange (issue 29)."""
    params = list(filter(None, map(_REQUEST_PARAMS, exchanges)))
    for name in _TOKEN_PARAMS:
        given: list[Any] = list(map(dict.get, params, repeat(name)))
        if given.count(None) == len(given):
            continue
        if not _TOKEN_PARAM_TYPES.issuperset(map(type, given)):
            return False
        counts = set(given)  # ints and None only: no bool or float hides behind an equal int
        counts.discard(None)
        if not (1 <= min(counts) and max(counts) <= MAX_TOKENS_PARAM):
            return False
    return True


def _check_request(ex: Exchange, where: str) -> None:
    params = ex.request.params
    for name in _TOKEN_PARAMS:
        value = params.get(name)
        # bool is an int to Python, not a token count; a float is not a count either.
        if value is not None and not (type(value) is int and 1 <= value <= MAX_TOKENS_PARAM):
            raise DecodeError(
                f"{name} must be null or an integer from 1 to {MAX_TOKENS_PARAM}", f"{where}.request.params.{name}"
            )
    room = MAX_NESTING - _ITEM_LEVEL
    for i, message in enumerate(ex.request.messages):
        if _deeper_than(message, room):
            raise DecodeError(f"nested more than {MAX_NESTING} levels", f"{where}.request.messages[{i}]")
    for name, value in params.items():
        if (type(value) is dict or type(value) is list) and _deeper_than(value, room):
            key = f".{name}" if name.isidentifier() else f"[{encode(name).decode()}]"
            raise DecodeError(f"nested more than {MAX_NESTING} levels", f"{where}.request.params{key}")


def _deeper_than(node: dict[str, Any] | list[Any], room: int) -> bool:
    """Whether the object or array ``node``, with ``room`` levels allowed below it, nests deeper.

    Recursive, but never deeper than ``room`` (at most :data:`MAX_NESTING`) calls."""
    for child in node.values() if type(node) is dict else node:
        if type(child) is dict or type(child) is list:  # what the JSON decoder builds, exactly
            if room == 0 or _deeper_than(child, room - 1):
                return True
    return False


def _fits(value: float | None, high: float) -> bool:
    # NaN and the infinities fail the comparison, so they are out of range too.
    return value is None or 0 <= value <= high


def _with_sane_figures(ex: Exchange, excluded: Counter[str]) -> Exchange:
    usage = ex.response.usage
    latency_ok = _fits(ex.latency_ms, MAX_LATENCY_MS)
    if (
        latency_ok
        and _fits(usage.cost_usd, MAX_COST_USD)
        and _fits(usage.input_tokens, MAX_TOKEN_FIGURE)
        and _fits(usage.output_tokens, MAX_TOKEN_FIGURE)
        and _fits(usage.prompt_tokens, MAX_TOKEN_FIGURE)
        and _fits(usage.completion_tokens, MAX_TOKEN_FIGURE)
    ):
        return ex
    bad: dict[str, None] = {}
    for name, canonical, high in _FIGURES:
        if not _fits(getattr(usage, name), high):
            bad[name] = None
            excluded[canonical] += 1
    if not latency_ok:
        excluded["latency_ms"] += 1
    response = ex.response
    if bad:
        response = msgspec.structs.replace(response, usage=msgspec.structs.replace(usage, **bad))
    return msgspec.structs.replace(ex, response=response, latency_ms=ex.latency_ms if latency_ok else None)


#: The usage fields checked: (field, the name it is counted under, the largest value taken).
_FIGURES = (
    ("cost_usd", "cost_usd", MAX_COST_USD),
    ("input_tokens", "input_tokens", MAX_TOKEN_FIGURE),
    ("prompt_tokens", "input_tokens", MAX_TOKEN_FIGURE),
    ("output_tokens", "output_tokens", MAX_TOKEN_FIGURE),
    ("completion_tokens", "output_tokens", MAX_TOKEN_FIGURE),
)
