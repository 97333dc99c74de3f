"""``shadowtrial send``: exchanges to a sidecar's tap, as a gateway sends them.

    shadowtrial send FILE.jsonl [--rate 200/s] [--count N] [--batch 100]
    shadowtrial send --simulate --team search [--count 6000] [--rate 200/s]

A file holds one exchange per line (JSONL/NDJSON, the tap's wire shape; ``-`` reads standard
input). Every line is checked with the tap's own decoder before anything is sent, so a bad
line is named (line number and field) and nothing of the file is counted. ``--simulate``
makes the demo's traffic instead (:mod:`sidecar.demo.traffic`). Lines go out as they are
written, in JSON-array batches to ``POST /v1/exchanges``, paced to ``--rate``.

Progress goes to standard error: a bar on a terminal, a plain line every 2 s otherwise; the
summary to standard output (``--json``: one JSON object). The tap's credential (``--token``
or ``$SHADOWTRIAL_TAP_TOKEN``) is sent as ``Authorization: Bearer`` and never printed.

Exit status: 0 sent; 1 the tap refused a batch or could not be reached (what was sent
before is in the summary); 2 a bad file or options, nothing sent; 130 interrupted.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import secrets
import sys
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import IO, TYPE_CHECKING, Any

from sidecar.ingest.wire import DecodeError, decode_exchanges

if TYPE_CHECKING:
    import httpx

DEFAULT_TAP = "http://127.0.0.1:8790"
DEFAULT_SIMULATED = 1000
MAX_BATCH = 1000
_RATE = re.compile(r"\s*([0-9]*\.?[0-9]+)\s*(?:/\s*(s|sec|second|m|min|minute|h|hour))?\s*")
_PER = {None: 1.0, "s": 1.0, "sec": 1.0, "second": 1.0, "m": 60.0, "min": 60.0, "minute": 60.0,
        "h": 3600.0, "hour": 3600.0}
_ITEM = re.compile(r"^\$\[(\d+)\]")


class SendError(Exception):
    """Why sending stopped; ``status`` is the exit status."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status


def rate(text: str) -> float:
    """``200``, ``200/s``, ``600/min``, ``3600/h`` → exchanges per second."""
    m = _RATE.fullmatch(text)
    if not m or float(m.group(1)) <= 0 or not math.isfinite(float(m.group(1))):
        raise argparse.ArgumentTypeError(f"{text!r} is not a rate: give N/s, N/min or N/h with N above 0")
    return float(m.group(1)) / _PER[m.group(2)]


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError("must be at least 1")
    return value


def _batch(text: str) -> int:
    value = _positive(text)
    if value > MAX_BATCH:
        raise argparse.ArgumentTypeError(f"must be at most {MAX_BATCH}")
    return value


def add_parser(sub: Any) -> None:
    sp = sub.add_parser(
        "send", help="send exchanges to a sidecar's tap: a JSONL file, or simulated traffic for a team",
        description="Send exchanges to the tap (POST /v1/exchanges), as a gateway does: each line of a JSONL/NDJSON "
                    "file, or --simulate the demo's traffic for a team. Every line of a file is checked first; a bad "
                    "one is named by line and field and nothing is sent. Exit status: 0 sent, 1 the tap refused or "
                    "could not be reached, 2 a bad file or option, 130 interrupted.",
    )
    sp.add_argument("file", nargs="?", help="a file of exchanges, one JSON object a line ('-': standard input)")
    sp.add_argument("--simulate", action="store_true",
                    help="send SIMULATED traffic for --team instead of a file: the fake provider's incumbent answers, "
                         "each with its quality marker")
    sp.add_argument("--team", help="with --simulate: the team the exchanges belong to")
    sp.add_argument("--model", help="with --simulate: the served model (default sim-incumbent-large)")
    sp.add_argument("--gateway", help="with --simulate: the gateway's name (default sim-gateway)")
    sp.add_argument("--route", help="with --simulate: the route (default: none)")
    sp.add_argument("--quality", type=float,
                    help="with --simulate: the served answers' planted quality, 0 to 1 (default 0.55, the demo's)")
    sp.add_argument("--seed", type=int, default=7, help="with --simulate: the same seed, the same traffic (default 7)")
    sp.add_argument("--count", type=_positive,
                    help=f"exchanges to send (--simulate: default {DEFAULT_SIMULATED}; a file: at most its first N)")
    sp.add_argument("--rate", type=rate, help="at most this many exchanges a second: 200, 200/s, 600/min, 3600/h "
                                              "(default: as fast as the tap answers)")
    sp.add_argument("--batch", type=_batch, default=100,
                    help=f"exchanges per request, a JSON array (default 100, at most {MAX_BATCH}; with --rate, at "
                         "most a tenth of a second's worth)")
    sp.add_argument("--tap", help=f"the tap's URL (default $SHADOWTRIAL_TAP_URL or {DEFAULT_TAP})")
    sp.add_argument("--token", help="the tap's gateway credential, sent as a bearer token and never printed "
                                    "(default $SHADOWTRIAL_TAP_TOKEN; needed when tap.token_env is set)")
    sp.add_argument("--json", action="store_true", help="print the summary as one JSON object")


# -- what is sent: (file line, exchange's JSON bytes) -------------------------------------------


def read_lines(name: str, stream: IO[bytes], limit: int | None) -> list[tuple[int, bytes]]:
    """The exchanges of a JSONL stream, each checked by the tap's decoder; :class:`SendError`
    (status 2) names the first bad line and field."""
    out: list[tuple[int, bytes]] = []
    for lineno, raw in enumerate(stream, start=1):
        line = raw.strip()
        if not line:
            continue
        where = f"{name}: line {lineno}"
        if not line.startswith(b"{"):
            raise SendError(f"{where}: not an exchange (a JSON object on one line); a file holds one a line", 2)
        try:
            decode_exchanges(line, "application/json")
        except DecodeError as exc:
            at = f" (field {exc.path})" if exc.path and exc.path != "$" else ""
            raise SendError(f"{where}: {exc}{at}", 2) from None
        except RecursionError:
            raise SendError(f"{where}: nested too deeply", 2) from None
        out.append((lineno, line))
        if limit is not None and len(out) >= limit:
            break
    if not out:
        raise SendError(f"{name}: no exchange in it", 2)
    return out


def _encode(exchange: dict[str, Any]) -> bytes:
    return json.dumps(exchange, ensure_ascii=False, separators=(",", ":")).encode()


# -- progress ----------------------------------------------------------------------------------


@dataclass
class Tally:
    """What the tap answered, summed over the batches."""

    sent: int = 0
    accepted: int = 0
    sampled: int = 0
    shed: int = 0
    refused: int = 0
    batches: int = 0
    started: float = field(default_factory=time.monotonic)

    def add(self, count: int, reply: Mapping[str, Any]) -> None:
        self.sent += count
        self.batches += 1
        for name in ("accepted", "sampled", "shed", "refused"):
            value = reply.get(name, 0)
            setattr(self, name, getattr(self, name) + (value if isinstance(value, int) else 0))

    def seconds(self) -> float:
        return time.monotonic() - self.started


class Progress:
    """On a terminal, one bar redrawn in place; otherwise a plain line every ``every`` seconds."""

    WIDTH = 24

    def __init__(self, total: int, stream: IO[str], *, every: float = 2.0) -> None:
        self.total = total
        self.stream = stream
        self.tty = stream.isatty()
        self.every = every
        self._last = time.monotonic()

    def line(self, t: Tally) -> str:
        elapsed = max(t.seconds(), 1e-9)
        speed = t.sent / elapsed
        share = t.sent / self.total if self.total else 1.0
        left = (self.total - t.sent) / speed if speed > 0 else math.inf
        eta = f"{left:,.0f}s left" if math.isfinite(left) else "—"
        counts = f"{t.sent:,}/{self.total:,} sent  {speed:,.0f}/s  sampled {t.sampled:,}  shed {t.shed:,}"
        if not self.tty:
            return f"send: {counts}, {share:.0%}, {eta}"
        filled = round(self.WIDTH * share)
        return f"[{'#' * filled}{'.' * (self.WIDTH - filled)}] {share:4.0%}  {counts}  {eta}"

    def update(self, t: Tally) -> None:
        if self.tty:
            self.stream.write("\r\033[K" + self.line(t))
            self.stream.flush()
        elif time.monotonic() - self._last >= self.every:
            self.stream.write(self.line(t) + "\n")
            self.stream.flush()
            self._last = time.monotonic()

    def done(self) -> None:
        if self.tty:
            self.stream.write("\n")
            self.stream.flush()


# -- the command ---------------------------------------------------------------------------------


def run(args: argparse.Namespace, environ: Mapping[str, str]) -> int:
    """``shadowtrial send``; its exit status (module docstring). Errors are one line on stderr."""
    tap = (args.tap or environ.get("SHADOWTRIAL_TAP_URL") or DEFAULT_TAP).rstrip("/")
    url = f"{tap}/v1/exchanges"
    token = (args.token or environ.get("SHADOWTRIAL_TAP_TOKEN") or "").strip()
    tally = Tally()
    try:
        source, lines, items = _source(args)
        progress = Progress(items, sys.stderr)
        _send(url, token, lines, args, tally, progress)
    except SendError as exc:
        print(f"shadowtrial: {exc}", file=sys.stderr)
        if tally.sent:
            print(_summary_text(url, tally, "sent before it stopped"), file=sys.stderr)
        return exc.status
    except KeyboardInterrupt:
        print(f"\nshadowtrial: interrupted; {_summary_text(url, tally, 'sent')}", file=sys.stderr)
        return 130
    summary = {"tap": url, "source": source, **{k: getattr(tally, k) for k in
                                                 ("sent", "accepted", "sampled", "shed", "refused", "batches")},
               "seconds": round(tally.seconds(), 3)}
    if args.json:
        print(json.dumps(summary))
    else:
        print(_summary_text(url, tally, "sent"))
        if tally.sampled == 0:
            print("none was sampled: no running trial matches their team and model (shadowtrial trials list), or "
                  "each trial's sample rate passed them by")
    return 0


def _source(args: argparse.Namespace) -> tuple[str, Iterator[tuple[int | None, bytes]], int]:
    """(what is sent, its lines, how many); a wrong combination of options is status 2."""
    if args.simulate == (args.file is not None):
        raise SendError("give a file of exchanges or --simulate --team TEAM (one of them)", 2)
    simulated_only = [f"--{n}" for n in ("team", "model", "gateway", "route", "quality")
                      if getattr(args, n) is not None]
    if not args.simulate:
        if simulated_only:
            raise SendError(f"{', '.join(simulated_only)} go with --simulate; a file's exchanges say their own", 2)
        name = "standard input" if args.file == "-" else args.file
        try:
            if args.file == "-":
                lines = read_lines(name, sys.stdin.buffer, args.count)
            else:
                with open(args.file, "rb") as fh:
                    lines = read_lines(name, fh, args.count)
        except OSError as exc:
            raise SendError(f"cannot read {args.file!r}: {exc.strerror or exc}", 2) from None
        return name, iter([(n, b) for n, b in lines]), len(lines)
    if not args.team:
        raise SendError("--simulate needs --team TEAM (the team whose trial should see the traffic)", 2)
    if args.quality is not None and not 0.0 <= args.quality <= 1.0:
        raise SendError("--quality must be from 0 to 1", 2)
    from sidecar.demo.traffic import DEFAULT_GATEWAY, DEFAULT_MODEL, simulated_exchanges

    count = args.count or DEFAULT_SIMULATED
    generated = simulated_exchanges(
        team=args.team, count=count, run=secrets.token_hex(4), model=args.model or DEFAULT_MODEL,
        gateway=args.gateway or DEFAULT_GATEWAY, route=args.route, quality=args.quality, seed=args.seed,
    )
    return "simulated", ((None, _encode(ex)) for ex in generated), count


def _send(url: str, token: str, lines: Iterator[tuple[int | None, bytes]], args: argparse.Namespace,
          tally: Tally, progress: Progress) -> None:
    import httpx  # on use: the CLI starts without it

    size = args.batch if args.rate is None else max(1, min(args.batch, math.ceil(args.rate / 10)))
    headers = {"Content-Type": "application/json"} | ({"Authorization": f"Bearer {token}"} if token else {})
    tally.started = time.monotonic()  # the rate's schedule starts with the first request
    try:
        with httpx.Client(timeout=httpx.Timeout(30.0, connect=5.0)) as client:
            while batch := _take(lines, size):
                if args.rate is not None:  # the schedule: exchange n leaves at start + n / rate
                    wait = tally.started + tally.sent / args.rate - time.monotonic()
                    if wait > 0:
                        time.sleep(wait)
                body = b"[" + b",".join(line for _, line in batch) + b"]"
                try:
                    r = client.post(url, content=body, headers=headers)
                except httpx.InvalidURL as exc:
                    raise SendError(f"{url} is not a usable tap URL: {exc}", 1) from None
                except httpx.HTTPError as exc:
                    raise SendError(f"cannot reach the tap at {url}: {_one_line(exc)}", 1) from None
                tally.add(len(batch), _reply(r, url, batch, tally.sent))
                progress.update(tally)
    finally:
        progress.done()


def _take(lines: Iterator[tuple[int | None, bytes]], size: int) -> list[tuple[int | None, bytes]]:
    batch: list[tuple[int | None, bytes]] = []
    for item in lines:
        batch.append(item)
        if len(batch) == size:
            break
    return batch


def _reply(r: httpx.Response, url: str, batch: list[tuple[int | None, bytes]], before: int) -> dict[str, Any]:
    """The tap's 202 answer, or :class:`SendError` saying why it refused (status 1)."""
    try:
        data = r.json()
    except ValueError:
        data = None
    if r.status_code == 202 and isinstance(data, dict):
        return data
    first, last = batch[0][0], batch[-1][0]
    which = (f"exchanges {before + 1}-{before + len(batch)}" if first is None or last is None
             else f"lines {first}-{last}")
    err = data.get("error") if isinstance(data, dict) else None
    if isinstance(err, dict) and err.get("code"):
        where = _where(err.get("field"), batch)
        hint = " (the tap needs its credential: --token or $SHADOWTRIAL_TAP_TOKEN)" if r.status_code == 401 else ""
        raise SendError(f"the tap refused {which}: {r.status_code} {err['code']}: {err.get('message', '')}"
                        f"{where}{hint}", 1)
    raise SendError(f"{r.status_code} {r.reason_phrase} from {url}: not the tap's answer (is --tap / "
                    f"$SHADOWTRIAL_TAP_URL the tap's listener?)", 1)


def _where(path: Any, batch: list[tuple[int | None, bytes]]) -> str:
    """The tap's ``field`` (``$[3].team``, an index into the batch) as the file line it is."""
    if not isinstance(path, str) or not path:
        return ""
    m = _ITEM.match(path)
    if m and int(m.group(1)) < len(batch) and batch[int(m.group(1))][0] is not None:
        return f" (line {batch[int(m.group(1))][0]}, field ${path[m.end():]})"
    return f" (field {path})"


def _summary_text(url: str, t: Tally, verb: str) -> str:
    speed = t.sent / t.seconds() if t.seconds() > 0 else 0.0
    refused = f", {t.refused:,} refused (a team the credential does not cover)" if t.refused else ""
    return (f"{t.sent:,} exchange{'' if t.sent == 1 else 's'} {verb} to {url} in {t.seconds():.1f} s "
            f"({speed:,.0f}/s): {t.accepted:,} accepted, {t.sampled:,} sampled by running trials, "
            f"{t.shed:,} shed{refused}")


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__
