"""Requests aiohttp's HTTP parser refuses never echo a token, on any listener (issue 21, item 2).

A valid credential (the admin JWT, the tap's shared token, the uplink's signed token) is
sent inside malformed requests — a 0x7f or NUL after it, a bare CR, a line over the limit,
in the request target, as a header name — on raw sockets to the tap, the admin port and
the collector. Every answer is a JSON ``400 malformed_request`` that contains no 16-character
piece of any credential; no log record at any level contains one either, none carries a
traceback, and the whole run costs each listener one WARNING line.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Callable

import msgspec
import pytest

from sidecar.api.listener import RefusalLog, describe
from tests.harness import Harness
from tests.sidecar.api.raw_http import exchange, json_error, status_of
from tests.uplink.kit import UplinkKit

TAP_TOKEN = "tap-canary-5f0c2e9a7b1d4c8e9f3a6b2d"

Case = Callable[[str], bytes]


def _request(*header_lines: bytes, target: bytes = b"/v1/trials", method: bytes = b"GET") -> bytes:
    return method + b" " + target + b" HTTP/1.1\r\nHost: sidecar\r\n" + b"".join(header_lines) + b"\r\n"


#: Each builds a request the parser refuses around a credential ``t``.
CASES: dict[str, Case] = {
    "DEL after the token": lambda t: _request(b"Authorization: Bearer " + t.encode() + b"\x7f\r\n"),
    "NUL after the token": lambda t: _request(b"Authorization: Bearer " + t.encode() + b"\x00\r\n"),
    "control byte inside the token": lambda t: _request(
        b"Authorization: Bearer " + t[:20].encode() + b"\x01" + t[20:].encode() + b"\r\n"),
    "bare CR after the token": lambda t: _request(b"Authorization: Bearer " + t.encode() + b"\rX-Next: 1\r\n"),
    "header line over the limit": lambda t: _request(
        b"Authorization: Bearer " + t.encode() + b"A" * 9000 + b"\r\n"),
    "token in the target, then a DEL": lambda t: _request(target=b"/v1/trials?access_token=" + t.encode() + b"\x7f"),
    "token in an overlong target": lambda t: _request(target=b"/v1/trials?access_token=" + t.encode() + b"B" * 9000),
    "token as a header name": lambda t: _request(t.encode() + b"\x01: 1\r\n"),
    "token as the Content-Length": lambda t: _request(b"Content-Length: " + t.encode() + b"\r\n", method=b"POST"),
    "token before any request line": lambda t: t.encode() + b"\r\n\r\n",
    "token after an obs-fold": lambda t: _request(b"X-A: 1\r\n Authorization: Bearer " + t.encode() + b"\x7f\r\n"),
    "token in a chunk size": lambda t: (
        b"POST /v1/trials HTTP/1.1\r\nHost: sidecar\r\nTransfer-Encoding: chunked\r\n\r\n" + t.encode() + b"\r\n"),
}


def pieces(secret: str, width: int = 16) -> list[str]:
    """Every ``width``-character window of ``secret``: a prefix cut at 100 bytes is still found."""
    return [secret[i : i + width] for i in range(len(secret) - width + 1)]


def leaked(text: str, secrets: list[str]) -> list[str]:
    return [p for s in secrets for p in pieces(s) if p in text]


def record_text(record: logging.LogRecord) -> str:
    return logging.Formatter("%(name)s %(levelname)s %(message)s").format(record)


async def refuse_all(url: str, secrets: list[str]) -> list[str]:
    """Send every case with every secret; each answer must be a JSON 400 with nothing of the secret."""
    problems: list[str] = []
    for secret in secrets:
        for name, build in CASES.items():
            raw = await exchange(url, build(secret))
            if leaked(raw.decode("latin-1"), secrets):
                problems.append(f"{name}: the answer holds the token: {raw[:400]!r}")
                continue
            if status_of(raw) != 400:
                problems.append(f"{name}: {raw[:200]!r}")
                continue
            error = json_error(raw)
            if error["code"] != "malformed_request" or error["field"] is not None or not error["message"]:
                problems.append(f"{name}: {error}")
    return problems


def check_logs(caplog: pytest.LogCaptureFixture, secrets: list[str], listeners: tuple[str, ...]) -> None:
    records = caplog.records
    texts = [record_text(r) for r in records]
    assert not [t for t in texts if leaked(t, secrets)], "a log record holds a credential"
    assert not [t for r, t in zip(records, texts) if r.exc_info or r.exc_text], "a log record carries a traceback"
    assert not [t for r, t in zip(records, texts) if r.levelno >= logging.ERROR], "a malformed request logged an ERROR"
    for listener in listeners:
        lines = [r.getMessage() for r in records
                 if r.name == "shadowtrial.http" and r.getMessage().startswith(f"{listener} listener:")]
        assert len(lines) == 1, f"{listener}: {len(lines)} lines for {len(CASES)} kinds of malformed request: {lines}"
        assert "refused a malformed request" in lines[0] and "127.0.0.1" in lines[0], lines[0]


async def test_tap_and_admin_never_echo_or_log_a_token_in_a_malformed_header(
    tmp_path: Path, caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    async with Harness(tmp_path, auth=True, tap_token_env="TAP_TOKEN", environ={"TAP_TOKEN": TAP_TOKEN}) as h:
        assert h.sidecar
        secrets = [h.token(), TAP_TOKEN]
        caplog.clear()
        problems = await refuse_all(h.sidecar.admin_url, secrets) + await refuse_all(h.sidecar.tap_url, secrets)
        assert problems == []
        check_logs(caplog, secrets, ("admin", "tap"))
        # The listeners still serve well-formed requests with the same credentials.
        assert h.admin and (await h.admin.get("/v1/trials")).status_code == 200


async def test_the_collector_never_echoes_or_logs_a_token_in_a_malformed_header(
    tmp_path: Path, caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    kit = UplinkKit(tmp_path)
    async with kit.collector() as c:
        secrets = [kit.signer().token()]
        caplog.clear()
        assert await refuse_all(c.url, secrets) == []
        check_logs(caplog, secrets, ("collector",))


async def test_a_flood_of_malformed_requests_is_one_warning_a_minute(caplog: pytest.LogCaptureFixture) -> None:
    """The rate limit itself, on a fake clock: the first refusal is logged, the next ones in the
    interval are counted, and the first line after it says how many there were."""
    caplog.set_level(logging.DEBUG, logger="shadowtrial.http")
    now = [1000.0]
    refusals = RefusalLog("admin", interval_s=60.0, clock=lambda: now[0])
    for _ in range(500):
        refusals.note(logging.WARNING, "refused a malformed request: x", "192.0.2.1")
        now[0] += 0.1  # 500 requests in 50 s
    refusals.note(logging.ERROR, "unexpected error handling a request (ValueError)", None)  # its own budget
    now[0] = 1000.0 + 60.0  # the interval has passed
    refusals.note(logging.WARNING, "refused a malformed request: x", "192.0.2.2")
    lines = [(r.levelno, r.getMessage()) for r in caplog.records]
    assert lines == [
        (logging.WARNING, "admin listener: refused a malformed request: x from 192.0.2.1"),
        (logging.ERROR, "admin listener: unexpected error handling a request (ValueError) from an unknown peer"),
        (logging.WARNING, "admin listener: refused a malformed request: x from 192.0.2.2; 499 more since the last such line"),
    ]


@pytest.mark.parametrize("message", [
    "Duplicate 'Authorization' header found.",
    "Invalid header value char:\n\n  b'Authorization: Bearer secret'\n  ^",
    "Bad status line 'secret'",
    "secret",  # letters only, but the whole of it: still not a description aiohttp makes
])
def test_a_description_never_carries_the_parser_text(message: str) -> None:
    from aiohttp.http_exceptions import BadHttpMessage

    text = describe(BadHttpMessage(message))
    assert "secret" not in text and "Authorization" not in text
