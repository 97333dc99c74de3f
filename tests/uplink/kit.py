"""Keys, configs and a capturing collector for the uplink's tests."""

from __future__ import annotations

import asyncio
import gzip
import sqlite3
from pathlib import Path
from typing import Any, Awaitable, Callable

from aiohttp import web

from sidecar.auth.mint import generate_key_pair
from sidecar.collector.server import CollectorServer
from sidecar.config import CollectorConfig, CollectorKeyConfig
from uplink.signing import Signer, load_private_key

AUDIENCE = "collector.test"
ISSUER = "sidecar-fleet.test"
KID = "sidecar-key-1"


class UplinkKit:
    """A sidecar key pair, the collector's config for it, and every request body the collector saw."""

    def __init__(self, tmp: Path, *, content_teams: tuple[str, ...] = ()) -> None:
        self.tmp = tmp
        self.private, self.public = generate_key_pair(tmp / "uplink-keys", name="sidecar")
        self.db = tmp / "collector.db"
        self.cfg = CollectorConfig(
            listen="127.0.0.1:0", db_path=str(self.db), audience=AUDIENCE, issuers=(ISSUER,),
            keys=(CollectorKeyConfig(kid=KID, path=str(self.public)),), content_teams=content_teams,
        )
        #: Every request body, decompressed (the canary scan reads them).
        self.bodies: list[bytes] = []
        self.statuses: list[int] = []
        #: When set (not None), a batch's answer is held until the event is set: the batch
        #: is stored, its sender has not heard back — a batch in flight.
        self.gate: asyncio.Event | None = None
        self.held_answers = 0

    def signer(self, **over: Any) -> Signer:
        kw: dict[str, Any] = {"key": load_private_key(str(self.private)), "kid": KID, "issuer": ISSUER,
                              "audience": AUDIENCE}
        kw.update(over)
        return Signer(**kw)

    def collector(self, port: int | None = None) -> CollectorServer:
        return CollectorServer(self.cfg, port=port, middlewares=(self._capture,))

    @web.middleware
    async def _capture(
        self, request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        if request.method == "POST" and request.path == "/v1/uplink/batches":
            raw = await request.read()  # aiohttp keeps it for the handler
            try:
                self.bodies.append(gzip.decompress(raw))
            except (OSError, EOFError):
                self.bodies.append(raw)
        resp = await handler(request)
        self.statuses.append(resp.status)
        if self.gate is not None and request.method == "POST" and request.path == "/v1/uplink/batches":
            self.held_answers += 1
            await self.gate.wait()
        return resp

    def uplink_toml(self, url: str, **over: Any) -> str:
        values: dict[str, Any] = {
            "collector_url": url, "sidecar_id": "gw-1/sidecar-test", "private_key_file": str(self.private),
            "key_id": KID, "audience": AUDIENCE, "issuer": ISSUER, "backoff_base_seconds": 0.05,
            "backoff_cap_seconds": 0.5, "idle_poll_seconds": 0.05, "timeout_seconds": 5.0,
            "state_interval_seconds": 0.1,
        }
        values.update(over)
        lines = [f"{k} = {v!r}" if not isinstance(v, str) else f'{k} = "{v}"' for k, v in values.items()]
        return "[uplink]\n" + "\n".join(lines) + "\n"

    def held(self, kind: str = "case_result") -> list[tuple[str, bytes]]:
        """What the collector's database holds, read directly."""
        if not self.db.exists():
            return []
        conn = sqlite3.connect(self.db)
        try:
            rows = conn.execute("SELECT id, body FROM collected_records WHERE kind = ? ORDER BY seq", (kind,))
            return [(r[0], bytes(r[1])) for r in rows]
        finally:
            conn.close()
