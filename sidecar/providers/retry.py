"""The one retry loop every provider client shares, and the httpx boundary.

Contract of :func:`send_with_retries`:

- It never raises for a remote outcome: every httpx exception and every HTTP
  status becomes a :class:`ProviderResult`. Cancellation from the caller still
  propagates (that is not a remote outcome).
- Retried: 429, 502, 503, 504 (``RetryPolicy.retry_statuses``) and connection
  errors (refused/unreachable connects, resets and disconnects before a whole
  response) — but never after an attempt whose fate is unknown (a 504, a reset
  after the request went out) once ``max_unknown_fate`` such attempts were made
  (default 1): the spend cap reserves one worst case per call, and a second
  attempt that may also bill could take spend past it. Backoff is exponential with full jitter; a ``Retry-After`` header
  (seconds or an HTTP date; also ``retry-after-ms``) is a floor on the delay.
- Not retried: timeouts (the attempt may have been billed), other 4xx, other
  5xx (500 is a deterministic server error more often than not), a 2xx whose
  body cannot be read (``malformed``).
- Everything runs under one overall deadline measured from the call: each
  attempt is cut at the deadline, and a delay that would end at or after it
  is not slept; the last failure is returned instead.
- ``may_have_billed``/``unknown_fate_attempts`` count attempts that reached the
  provider with an unknown fate: read/write timeouts and the deadline cutting
  an attempt, resets after the request was sent, a 504 (a gateway gave up on
  an upstream that may still finish) and a 2xx we could not read (billed, usage
  unknown). Connect failures and plain refusals (429/503) are not billed.
"""

from __future__ import annotations

import asyncio
import email.utils
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import NamedTuple, Protocol

import httpx

from sidecar.providers.base import ErrorKind, ProviderResult
from sidecar.providers.errors import ProviderConfigError

Sleep = Callable[[float], Awaitable[None]]
"""Awaited with each backoff delay in seconds; tests inject a recorder."""

Clock = Callable[[], float]
"""Monotonic seconds; the overall deadline and ``latency_ms`` use it."""


class Completion(NamedTuple):
    """What a provider-specific parser reads out of a 2xx body."""

    content: str
    finish_reason: str | None
    input_tokens: int | None
    output_tokens: int | None
    #: The body reported usage that is not a count (:mod:`sidecar.providers.usage`).
    usage_disputed: bool = False


class Headers(Protocol):
    """What the retry loop reads of a response's headers (``httpx.Headers``, aiohttp's
    case-insensitive ones): a value by name, any case."""

    def get(self, key: str, default: None = None) -> str | None: ...


class Response(Protocol):
    """A response read whole: an ``httpx.Response``, or the provider transport's own
    :class:`~sidecar.providers.transport.Reply`."""

    @property
    def status_code(self) -> int: ...

    @property
    def content(self) -> bytes: ...

    @property
    def headers(self) -> Headers: ...


Send = Callable[[], Awaitable[Response]]
Parse = Callable[[bytes], Completion | None]
"""Parses a 2xx body; returns None when it is not a completion we can read."""

DEFAULT_RETRY_STATUSES = frozenset({429, 502, 503, 504})


@dataclass(frozen=True)
class RetryPolicy:
    """How often and how long to retry one call.

    ``max_retries`` is the number of attempts after the first. The delay before
    retry *n* (1-based) is uniform in ``[0, min(max_delay_s, base_delay_s *
    2**(n-1))]``, raised to the server's Retry-After when that is larger.
    ``deadline_s`` bounds the whole call, attempts and sleeps together.
    """

    deadline_s: float
    max_retries: int
    base_delay_s: float = 0.5
    max_delay_s: float = 8.0
    retry_statuses: frozenset[int] = field(default=DEFAULT_RETRY_STATUSES)
    #: Attempts whose fate is unknown (they may have been billed) that one call
    #: may make. The spend cap reserves one worst case per call, so the default
    #: of 1 means: after a reset-after-send or a 504, do not retry.
    max_unknown_fate: int = 1

    def __post_init__(self) -> None:
        if not self.deadline_s > 0:
            raise ProviderConfigError(f"deadline_s must be > 0, got {self.deadline_s!r}")
        if self.max_retries < 0:
            raise ProviderConfigError(f"max_retries must be >= 0, got {self.max_retries!r}")
        if self.base_delay_s < 0 or self.max_delay_s < self.base_delay_s:
            raise ProviderConfigError("need 0 <= base_delay_s <= max_delay_s")

    def backoff(self, retry: int, rng: random.Random) -> float:
        """Full-jitter delay before retry number ``retry`` (1-based)."""
        cap = min(self.max_delay_s, self.base_delay_s * 2 ** (retry - 1))
        return rng.uniform(0.0, cap)


def parse_retry_after(headers: Headers, *, now: datetime | None = None) -> float | None:
    """Seconds the server asked us to wait, or None when absent or unreadable.

    Reads ``retry-after-ms`` (OpenAI) first, then ``Retry-After`` as delta
    seconds or an HTTP date (a date in the past means 0).
    """
    raw_ms = headers.get("retry-after-ms")
    if raw_ms is not None:
        try:
            ms = float(raw_ms)
        except ValueError:
            ms = -1.0
        if ms >= 0:
            return ms / 1000.0
    raw = headers.get("retry-after")
    if raw is None:
        return None
    raw = raw.strip()
    try:
        seconds = float(raw)
    except ValueError:
        pass
    else:
        return seconds if seconds >= 0 else None
    try:
        when = email.utils.parsedate_to_datetime(raw)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    current = now if now is not None else datetime.now(timezone.utc)
    return max(0.0, (when - current).total_seconds())


@dataclass(frozen=True)
class _Outcome:
    """One attempt, judged."""

    completion: Completion | None = None
    error: ErrorKind | None = None
    status: int | None = None
    retryable: bool = False
    retry_after: float | None = None
    unknown_fate: bool = False


async def _attempt(send: Send, parse: Parse, policy: RetryPolicy, remaining: float) -> _Outcome:
    """Run one attempt, cut at ``remaining`` seconds, and translate what happened."""
    try:
        async with asyncio.timeout(remaining):
            response = await send()
    except TimeoutError:
        # Our overall deadline cut the attempt; the request may be in flight.
        return _Outcome(error="timeout", unknown_fate=True)
    except httpx.ConnectTimeout:
        # Nothing was sent: as retryable as a refused connect.
        return _Outcome(error="connection", retryable=True)
    except httpx.PoolTimeout:
        # Our own pool is exhausted; nothing was sent, and waiting longer is the caller's call.
        return _Outcome(error="timeout")
    except httpx.TimeoutException:
        # Read/write timeout: the provider may be generating (and billing) right now.
        return _Outcome(error="timeout", unknown_fate=True)
    except httpx.ConnectError:
        return _Outcome(error="connection", retryable=True)
    except (httpx.ReadError, httpx.RemoteProtocolError):
        # Reset or disconnect after the request went out: retry, but it may have run.
        return _Outcome(error="connection", retryable=True, unknown_fate=True)
    except httpx.DecodingError:
        return _Outcome(error="malformed", unknown_fate=True)
    except httpx.TransportError:
        # WriteError, CloseError, ProxyError, ...: the request did not complete.
        return _Outcome(error="connection", retryable=True)

    status = response.status_code
    if 200 <= status < 300:
        completion = parse(response.content)
        if completion is None:
            return _Outcome(error="malformed", status=status, unknown_fate=True)
        return _Outcome(completion=completion, status=status)
    if status in policy.retry_statuses:
        return _Outcome(
            error="http_429" if status == 429 else "http_5xx",
            status=status,
            retryable=True,
            retry_after=parse_retry_after(response.headers),
            unknown_fate=status == 504,
        )
    if 400 <= status < 500:
        return _Outcome(error="http_4xx", status=status)
    if status >= 500:
        return _Outcome(error="http_5xx", status=status)
    # 1xx/3xx: not a chat completion (redirects are not followed on purpose).
    return _Outcome(error="malformed", status=status)


async def send_with_retries(
    send: Send,
    parse: Parse,
    *,
    policy: RetryPolicy,
    rng: random.Random,
    sleep: Sleep = asyncio.sleep,
    clock: Clock = time.monotonic,
) -> ProviderResult:
    """Call ``send`` until it succeeds, fails for good, or the deadline nears.

    See the module docstring for what is retried. ``send`` must build a fresh
    request each time; ``parse`` reads a 2xx body. Returns the success, or the
    last failure with ``attempts`` and the unknown-fate count.
    """
    start = clock()
    deadline = start + policy.deadline_s
    attempts = 0
    unknown = 0
    outcome = _Outcome(error="timeout")
    while True:
        remaining = deadline - clock()
        if remaining <= 0:  # only when a sleep overran what it was asked for
            return _result(outcome, attempts, unknown, (clock() - start) * 1000.0)
        attempts += 1
        outcome = await _attempt(send, parse, policy, remaining)
        unknown += outcome.unknown_fate
        if (
            outcome.completion is not None
            or not outcome.retryable
            or attempts > policy.max_retries
            or unknown >= policy.max_unknown_fate
        ):
            return _result(outcome, attempts, unknown, (clock() - start) * 1000.0)
        delay = policy.backoff(attempts, rng)
        if outcome.retry_after is not None:
            delay = max(delay, outcome.retry_after)
        if clock() + delay >= deadline:
            return _result(outcome, attempts, unknown, (clock() - start) * 1000.0)
        await sleep(delay)


def _result(outcome: _Outcome, attempts: int, unknown: int, latency_ms: float) -> ProviderResult:
    c = outcome.completion
    return ProviderResult(
        ok=c is not None,
        content=c.content if c else None,
        finish_reason=c.finish_reason if c else None,
        input_tokens=c.input_tokens if c else None,
        output_tokens=c.output_tokens if c else None,
        usage_disputed=c.usage_disputed if c else False,
        error=None if c else outcome.error,
        status=outcome.status,
        attempts=attempts,
        latency_ms=latency_ms,
        may_have_billed=unknown > 0,
        unknown_fate_attempts=unknown,
    )
