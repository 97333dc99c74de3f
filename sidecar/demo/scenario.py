"""``shadowtrial demo``: the whole loop in one command, on simulated models.

A fake OpenAI-compatible provider on loopback plays the incumbent, the
candidate (with a planted quality gap and a lower list price) and the judge; a
traffic generator plays the gateway — it calls the incumbent itself, as the
gateway would for real users, and hands copies of the served exchanges to the
tap. The sidecar runs on a temporary SQLite file with the real config loader,
tap, engine, judge and admin API. Nothing leaves the machine; no API key is used.

The admin API runs with authentication on, as in production: the demo writes a
throwaway Ed25519 key pair, configures ``auth.mode = "jwt"`` with its public half,
and mints itself a ``tenant_admin`` token for its team (``shadowtrial token`` does
the same from the command line).
"""

from __future__ import annotations

import asyncio
import os
import random
import sys
import tempfile
import time
from typing import Any

import httpx

from sidecar.app import Sidecar
from sidecar.auth.mint import generate_key_pair, load_signing_key, mint
from sidecar.config import load_config
from sidecar.demo.fake_provider import FakeModel, FakeProvider
from sidecar.demo.localconfig import loopback_config
from sidecar.cli.render import pct, render_trial, table, usd

INCUMBENT = "sim-incumbent-large"
CANDIDATE = "sim-candidate-small"
JUDGE = "sim-judge"
TEAM = "demo-team"
AUDIENCE = "shadowtrial-demo"
ISSUER = "shadowtrial-demo"

#: (input, output) list prices, dollars per million tokens: the candidate is the cheaper model.
PRICES = {INCUMBENT: (2.50, 10.00), CANDIDATE: (0.40, 1.60), JUDGE: (1.00, 4.00)}

TOPICS = [
    "Summarise the attached incident report for an executive.",
    "Write a SQL query that finds duplicate customer emails.",
    "Explain the difference between a mutex and a semaphore.",
    "Draft a polite reply declining a meeting invitation.",
    "What are the trade-offs of server-side rendering?",
    "Translate 'the invoice is overdue' into French and German.",
    "Suggest three names for a hiking app.",
    "How do I rotate a Kubernetes secret without downtime?",
]


class _Screen:
    """Progress on the terminal: one updating line on a TTY, a line every 2 s otherwise."""

    def __init__(self) -> None:
        self.tty = sys.stdout.isatty()
        self._last = 0.0

    def update(self, text: str) -> None:
        if self.tty:
            sys.stdout.write("\r\033[K" + text)
            sys.stdout.flush()
        elif time.monotonic() - self._last >= 2.0:
            print(text, flush=True)
            self._last = time.monotonic()

    def done(self) -> None:
        if self.tty:
            sys.stdout.write("\n")


async def _gateway(
    fake: FakeProvider, tap_url: str, n: int, seed: int, stop: asyncio.Event, sent: list[int]
) -> None:
    """Serve ``n`` simulated user requests from the incumbent and tap copies of them."""
    rng = random.Random(seed)
    async with httpx.AsyncClient(timeout=30.0) as client:
        sem = asyncio.Semaphore(16)

        async def serve_one(i: int) -> dict[str, Any]:
            async with sem:
                messages = [{"role": "user", "content": f"{rng.choice(TOPICS)} (request {i})"}]
                t0 = time.monotonic()
                r = await client.post(f"{fake.base_url}/chat/completions",
                                      json={"model": INCUMBENT, "messages": messages, "max_tokens": 400})
                body = r.json()
                latency = (time.monotonic() - t0) * 1000
                return {
                    "exchange_id": f"demo-{seed}-{i}",
                    "team": TEAM,
                    "gateway": "demo-gateway",
                    "model": INCUMBENT,
                    "request": {"messages": messages, "params": {"max_tokens": 400, "temperature": 0.2}},
                    "response": {
                        "content": body["choices"][0]["message"]["content"],
                        "finish_reason": body["choices"][0]["finish_reason"],
                        "usage": {"input_tokens": body["usage"]["prompt_tokens"],
                                  "output_tokens": body["usage"]["completion_tokens"]},
                    },
                    "latency_ms": latency,
                }

        batch = 32
        for start in range(0, n, batch):
            if stop.is_set():
                return
            exchanges = await asyncio.gather(*(serve_one(i) for i in range(start, min(n, start + batch))))
            await client.post(f"{tap_url}/v1/exchanges", json=list(exchanges))
            sent[0] += len(exchanges)


def demo_models() -> dict[str, FakeModel]:
    """The demo's simulated incumbent, candidate (a planted quality gap) and judge."""
    return {
        INCUMBENT: FakeModel(quality=0.55, quality_noise=0.12, latency_ms=(30, 90), filler_words=(30, 90)),
        CANDIDATE: FakeModel(quality=0.64, quality_noise=0.12, latency_ms=(15, 50), filler_words=(20, 70)),
        JUDGE: FakeModel(judge=True, latency_ms=(5, 20), tie_margin=0.04, position_bias=0.03),
    }


async def serve_fake_provider(listen: str, *, seed: int = 7) -> None:
    """``shadowtrial fake-provider``: the demo's models on an OpenAI-compatible endpoint, until SIGINT/SIGTERM."""
    import signal

    from sidecar.config import split_listen

    host, port = split_listen(listen)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    async with FakeProvider(demo_models(), seed=seed, host=host, port=port) as fake:
        print(f"shadowtrial fake-provider: {fake.base_url}  models: {', '.join(demo_models())}  (SIMULATED)", flush=True)
        await stop.wait()


def demo_auth(tmp: str) -> tuple[str, str]:
    """The ``[auth]`` table of a throwaway key pair in ``tmp``, and a token it accepts (an hour,
    ``tenant_admin`` of the demo's team)."""
    private, public = generate_key_pair(tmp, name="demo-admin")
    table = (f'[auth]\nmode = "jwt"\naudience = "{AUDIENCE}"\nissuer = "{ISSUER}"\n'
             f'[[auth.keys]]\npath = "{public}"\nalgorithms = ["EdDSA"]\nkid = "demo"\n')
    token = mint(key=load_signing_key(str(private), "EdDSA"), algorithm="EdDSA", kid="demo", subject="demo-operator",
                 audience=AUDIENCE, issuer=ISSUER, roles=["tenant_admin"], teams=[TEAM], ttl_s=3600)
    return table, token


async def run_demo(*, exchanges: int = 4000, seed: int = 7, time_budget_s: float = 45.0, hold: bool = False) -> int:
    """Run the demo; 0 when the sidecar never called the incumbent. ``hold``: after the verdict,
    keep the sidecar (and its console, over the demo's trial, left running) up until SIGINT/SIGTERM."""
    print("shadowtrial demo — SIMULATED models on a local fake provider; no real model is called.\n")
    models = demo_models()
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="shadowtrial-demo-") as tmp:
        async with FakeProvider(models, seed=seed) as fake:
            path = os.path.join(tmp, "demo.toml")
            auth_table, token = demo_auth(tmp)
            with open(path, "w") as fh:
                fh.write(loopback_config(
                    base_url=fake.base_url, db=os.path.join(tmp, "demo.db"), judge=JUDGE, prices=PRICES,
                    judge_max_tokens=256, timeout_s=10.0, deadline_s=20.0, extra=auth_table,
                ))
            config = load_config(path, {})
            async with Sidecar(config) as sidecar, httpx.AsyncClient(
                base_url=sidecar.admin_url, timeout=30, headers={"Authorization": f"Bearer {token}"}
            ) as admin:
                r = await admin.post("/v1/trials", json={
                    "team": TEAM, "incumbent_model": INCUMBENT, "candidate_model": CANDIDATE,
                    "spend_cap_usd": 5.0, "sample_rate": 0.5, "expected_cases": 500,
                }, headers={"Idempotency-Key": f"demo-{seed}"})
                r.raise_for_status()
                trial_id = r.json()["id"]
                print(f"trial {trial_id}: {CANDIDATE} (candidate) vs {INCUMBENT} (incumbent), sample rate 50%, cap $5\n")
                print(console_banner(sidecar.admin_url, trial_id, token))
                stop = asyncio.Event()
                sent = [0]
                gen = asyncio.create_task(_gateway(fake, sidecar.tap_url, exchanges, seed, stop, sent))
                screen = _Screen()
                view: dict[str, Any] = {}
                while True:
                    view = (await admin.get(f"/v1/trials/{trial_id}")).json()
                    v = view["verdict"]
                    elapsed = time.monotonic() - started
                    screen.update(
                        f"{elapsed:5.1f}s  sent {sent[0]:5d}  judged {v['cases']:4d}  win rate {pct(v['win_rate']):>6}  "
                        f"bounds {_bounds(v['decision_bounds'])}  spend {usd(view['spend']['known_micros'])}  → {v['wording']}"
                    )
                    decided = v["code"] != "inconclusive"
                    if decided or view["status"] != "running" or elapsed > time_budget_s or (gen.done() and _idle(view)):
                        break
                    try:
                        await asyncio.wait_for(sidecar.runtime.progress.wait(), timeout=0.5)
                    except asyncio.TimeoutError:
                        pass
                    sidecar.runtime.progress.clear()
                screen.done()
                stop.set()
                await gen
                # Cases already sampled finish and settle before the trial is stopped and tabled.
                await sidecar.runtime.idle()
                if not hold:  # held, the trial stays running for the console to show
                    await admin.post(f"/v1/trials/{trial_id}/stop")
                view = (await admin.get(f"/v1/trials/{trial_id}")).json()
                shadow_incumbent = sum(1 for q in fake.requests if q.model == INCUMBENT and _is_shadow(q.headers))
                _report(view, shadow_incumbent, time.monotonic() - started)
                if hold:
                    print(f"\nThe sidecar stays up: open {sidecar.admin_url}/console/trials/{trial_id} "
                          "(Ctrl-C ends the demo).", flush=True)
                    await _until_signalled()
    return 0 if shadow_incumbent == 0 else 1


def console_banner(admin_url: str, trial_id: str, token: str) -> str:
    """What the demo prints about its console: the address, and the development login it accepts."""
    return (
        f"console  {admin_url}/console/  (this trial: {admin_url}/console/trials/{trial_id})\n"
        f"login    paste this development token (tenant_admin of {TEAM}, valid 1 h) into the console's sign-in form:\n"
        f"         {token}\n"
    )


async def _until_signalled() -> None:
    import signal

    done = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, done.set)
    try:
        await done.wait()
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)


def _report(view: dict[str, Any], shadow_incumbent: int, wall: float) -> None:
    print()
    print(render_trial(view))
    print()
    rows = [
        *verdict_rows(view),
        ("incumbent calls made by the sidecar", str(shadow_incumbent)),
        ("wall time", f"{wall:.1f}s"),
    ]
    print(table(rows, ("SIMULATED MODELS — final verdict", "value")))


def verdict_rows(view: dict[str, Any]) -> list[tuple[str, str]]:
    """The verdict table's rows of a trial's view (``GET /v1/trials/{id}``)."""
    v, p = view["verdict"], view["paired"]
    return [
        ("verdict", f"{v['wording']} ({v['code']})"),
        ("judged cases", str(v["cases"])),
        ("candidate win rate", pct(v["win_rate"])),
        ("95% bootstrap interval", _bounds(v["interval"])),
        ("anytime-valid decision bounds", _bounds(v["decision_bounds"])),
        ("candidate cost vs incumbent", "—" if p["cost_ratio"] is None else f"{100 * p['cost_ratio']:.0f}%"),
        ("candidate p50 latency vs incumbent", "—" if p["latency_ratio"] is None else f"{100 * p['latency_ratio']:.0f}%"),
        ("evaluation spend (known)", f"{usd(view['spend']['known_micros'])} of {usd(view['spend']['cap_micros'])}"),
    ]


def _bounds(iv: dict[str, float] | None) -> str:
    return "—" if iv is None else f"[{pct(iv['lower'])}, {pct(iv['upper'])}]"


def _idle(view: dict[str, Any]) -> bool:
    return bool(view["funnel"]["in_flight"] == 0)


def _is_shadow(headers: dict[str, str]) -> bool:
    return any(k.lower() == "x-shadowtrial-shadow" for k in headers)
