"""``shadowtrial demo --stay``: the demo as a place to explore, until Ctrl-C.

One command, no key, no network. A fake provider on loopback plays every model; a
control-plane collector and a sidecar run on temporary SQLite files, the sidecar reporting
to the collector over its uplink (content uplink on for its gateway). Before it says
*ready* the demo populates both consoles through their real APIs:

- team ``demo-team`` (local execution): a trial that decided *Adoptable* and stopped on its
  decision; one that decided *Adoptable* and keeps running (``on_decision = "continue"``);
  one that decided *Rejected*; one promoted, whose watch then fires an alert as the new
  incumbent's answers drop;
- team ``demo-support`` (cut over to the control plane where the posture allows it: the
  sidecar forwards its sampled exchanges and the collector judges them): a trial still
  *Collecting*; one more of ``demo-team``, judged by the sidecar, *Collecting* too;
- team ``demo-ops``: a trial *Paused* because the team's prompt retention was switched off;
- at the collector, a dataset, an experiment (a comparison group of two arms) run to
  completion, and an A/B comparison of the same two models to its verdict.

The token it prints is ``platform_admin`` with the content permission (Compare and dataset
items need it); both consoles accept it.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import tempfile
import time
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable

import httpx

from sidecar.app import Sidecar
from sidecar.auth.mint import generate_key_pair, load_signing_key, mint
from sidecar.cli.render import table
from sidecar.collector.server import CollectorServer
from sidecar.config import load_config
from sidecar.demo.fake_provider import FakeModel, FakeProvider
from sidecar.demo.localconfig import loopback_config
from sidecar.demo.scenario import AUDIENCE, CANDIDATE, INCUMBENT, ISSUER, JUDGE, PRICES, TEAM, TOPICS, verdict_rows

#: More candidates of the demo's incumbent, each with its own planted quality.
CONTINUING = "sim-candidate-mini"
PROMOTED = "sim-candidate-medium"
WEAK = "sim-candidate-tiny"
SUPPORT_TEAM = "demo-support"
OPS_TEAM = "demo-ops"
GATEWAY = "demo-gateway"
UPLINK_AUDIENCE = "shadowtrial-demo-collector"
UPLINK_ISSUER = "shadowtrial-demo-sidecars"
UPLINK_KID = "demo-sidecar"
TOKEN_TTL_S = 12 * 3600.0
#: Items in the demo's dataset (the experiment and the A/B comparison run each on both sides;
#: an A/B verdict needs 20 at least).
DATASET_ITEMS = 20


def explore_models() -> dict[str, FakeModel]:
    """The demo's models with wide planted gaps and little noise, so every trial decides within a
    few dozen cases (the quick demo's narrower gap needs about a hundred)."""
    def model(quality: float, latency: tuple[float, float] = (10, 40)) -> FakeModel:
        return FakeModel(quality=quality, quality_noise=0.06, latency_ms=latency, filler_words=(20, 60))

    return {
        INCUMBENT: model(0.55, (20, 60)), CANDIDATE: model(0.68), CONTINUING: model(0.72), PROMOTED: model(0.74),
        WEAK: model(0.40, (5, 20)),
        JUDGE: FakeModel(judge=True, latency_ms=(5, 15), tie_margin=0.04, position_bias=0.03),
    }


PRICES_ALL = {**PRICES, CONTINUING: (0.30, 1.20), PROMOTED: (0.60, 2.40), WEAK: (0.10, 0.40)}


@dataclass
class Explorable:
    """What the populated demo holds: its two consoles, the token, and the ids it made."""

    sidecar_url: str
    collector_url: str
    token: str
    trials: dict[str, str] = field(default_factory=dict)
    watch_id: str = ""
    dataset_id: str = ""
    experiment_id: str = ""
    comparison_id: str = ""
    control_plane_site: bool = False


class DemoFailed(RuntimeError):
    """A step of populating the demo did not reach its state in time."""


async def _until(check: Callable[[], Awaitable[bool]], what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not await check():
        if time.monotonic() > deadline:
            raise DemoFailed(f"the demo timed out waiting for {what}")
        await asyncio.sleep(0.05)


def _served(team: str, i: int, prefix: str, content: str, model: str = INCUMBENT) -> dict[str, Any]:
    return {
        "exchange_id": f"{prefix}-{i}", "team": team, "gateway": GATEWAY, "model": model,
        "request": {"messages": [{"role": "user", "content": f"{TOPICS[i % len(TOPICS)]} (request {i})"}],
                    "params": {"max_tokens": 400, "temperature": 0.2}},
        "response": {"content": content, "finish_reason": "stop", "usage": {"input_tokens": 40, "output_tokens": 120}},
        "latency_ms": 40.0 + (i * 37) % 200,
    }


async def _traffic(fake: FakeProvider, tap: httpx.AsyncClient, team: str, start: int, n: int, prefix: str) -> None:
    """``n`` requests served by the incumbent (called here, as the gateway would) and tapped."""
    async with httpx.AsyncClient(timeout=30.0) as client:
        async def one(i: int) -> dict[str, Any]:
            messages = [{"role": "user", "content": f"{TOPICS[i % len(TOPICS)]} (request {i})"}]
            t0 = time.monotonic()
            r = await client.post(f"{fake.base_url}/chat/completions",
                                  json={"model": INCUMBENT, "messages": messages, "max_tokens": 400})
            body = r.json()
            ex = _served(team, i, prefix, body["choices"][0]["message"]["content"])
            ex["latency_ms"] = (time.monotonic() - t0) * 1000
            ex["response"]["usage"] = {"input_tokens": body["usage"]["prompt_tokens"],
                                       "output_tokens": body["usage"]["completion_tokens"]}
            return ex

        batch = await asyncio.gather(*(one(i) for i in range(start, start + n)))
    r = await tap.post("/v1/exchanges", json=list(batch))
    r.raise_for_status()


def _configs(tmp: str, base_url: str) -> tuple[str, str, str]:
    """The collector's and the sidecar's config files, and the operator's token."""
    admin_private, admin_public = generate_key_pair(tmp, name="demo-admin")
    uplink_private, uplink_public = generate_key_pair(tmp, name="demo-sidecar")
    auth = (f'[auth]\nmode = "jwt"\naudience = "{AUDIENCE}"\nissuer = "{ISSUER}"\n'
            f'[[auth.keys]]\npath = "{admin_public}"\nalgorithms = ["EdDSA"]\nkid = "demo"\n')
    common: dict[str, Any] = {"base_url": base_url, "judge": JUDGE, "prices": PRICES_ALL, "judge_max_tokens": 256,
                              "timeout_s": 10.0, "deadline_s": 20.0}
    collector = loopback_config(db=os.path.join(tmp, "collector-engine.db"), **common, extra=auth + (
        f'[collector]\nlisten = "127.0.0.1:0"\ndb_path = "{os.path.join(tmp, "collector.db")}"\n'
        f'audience = "{UPLINK_AUDIENCE}"\nissuers = ["{UPLINK_ISSUER}"]\ncontent_teams = ["{SUPPORT_TEAM}"]\n'
        f'[[collector.keys]]\nkid = "{UPLINK_KID}"\npath = "{uplink_public}"\n'))
    collector_path = os.path.join(tmp, "collector.toml")
    with open(collector_path, "w") as fh:
        fh.write(collector)
    teams = "".join(f"[teams.{t}]\nprompt_retention = true\n" for t in (TEAM, SUPPORT_TEAM, OPS_TEAM))
    sidecar = loopback_config(db=os.path.join(tmp, "demo.db"), **common, extra=auth + teams + (
        f'[sidecar]\ngateway = "{GATEWAY}"\n'
        f'[uplink]\ncontent = true\ncollector_url = "COLLECTOR_URL"\nsidecar_id = "{GATEWAY}/sidecar-1"\n'
        f'private_key_file = "{uplink_private}"\nkey_id = "{UPLINK_KID}"\naudience = "{UPLINK_AUDIENCE}"\n'
        f'issuer = "{UPLINK_ISSUER}"\nbackoff_base_seconds = 0.05\nbackoff_cap_seconds = 1.0\n'
        f'idle_poll_seconds = 0.1\nstate_interval_seconds = 0.5\nconsole_url = "COLLECTOR_URL/console/"\n'))
    sidecar_path = os.path.join(tmp, "demo.toml")
    with open(sidecar_path, "w") as fh:
        fh.write(sidecar)
    token = mint(key=load_signing_key(str(admin_private), "EdDSA"), algorithm="EdDSA", kid="demo",
                 subject="demo-operator", audience=AUDIENCE, issuer=ISSUER, roles=["platform_admin"],
                 teams=[TEAM, SUPPORT_TEAM, OPS_TEAM], content=True, ttl_s=TOKEN_TTL_S)
    return collector_path, sidecar_path, token


class _Api:
    """One admin API (the sidecar's or the collector's) with the demo's token."""

    def __init__(self, url: str, token: str) -> None:
        self.http = httpx.AsyncClient(base_url=url, timeout=30.0, headers={"Authorization": f"Bearer {token}"})

    async def call(self, method: str, path: str, **kw: Any) -> Any:
        r = await self.http.request(method, path, **kw)
        if r.status_code >= 400:
            raise DemoFailed(f"{method} {path} answered {r.status_code}: {r.text[:300]}")
        return r.json()

    async def trial(self, trial_id: str) -> dict[str, Any]:
        view: dict[str, Any] = await self.call("GET", f"/v1/trials/{trial_id}")
        return view

    async def create(self, key: str, **body: Any) -> str:
        base = {"team": TEAM, "incumbent_model": INCUMBENT, "spend_cap_usd": 5.0, "sample_rate": 1.0,
                "expected_cases": 500}
        made = await self.call("POST", "/v1/trials", json={**base, **body}, headers={"Idempotency-Key": key})
        return str(made["id"])


async def populate(
    fake: FakeProvider, sidecar: Sidecar, collector: CollectorServer, token: str,
    decided: Callable[[dict[str, Any]], None] = lambda view: None,
) -> Explorable:
    """Bring both consoles to the states the module docstring lists; the ids made. ``decided`` gets
    the view of the first trial once it stopped on its decision (the demo prints its verdict)."""
    out = Explorable(sidecar_url=sidecar.admin_url, collector_url=collector.url, token=token)
    admin, cp = _Api(sidecar.admin_url, token), _Api(collector.url, token)
    tap = httpx.AsyncClient(base_url=sidecar.tap_url, timeout=30.0)
    corpus = asyncio.ensure_future(_corpus(cp, out))
    try:
        # Control-plane execution for demo-support once this gateway's content uplink is on record.
        site = await admin.call("PUT", f"/v1/teams/{SUPPORT_TEAM}/posture",
                                json={"prompt_retention": True, "cut_over": True})
        out.control_plane_site = site.get("execution_site") == "control_plane"
        t = out.trials
        t["decided"] = await admin.create("demo-decided", candidate_model=CANDIDATE)
        t["continue"] = await admin.create("demo-continue", candidate_model=CONTINUING, on_decision="continue")
        t["rejected"] = await admin.create("demo-rejected", candidate_model=WEAK)
        t["promoted"] = await admin.create("demo-promoted", candidate_model=PROMOTED, on_decision="continue")
        # Local and still collecting: it samples a share of the same traffic, and its floor of
        # cases to a decision is higher than the demo ever sends.
        t["collecting_local"] = await admin.create("demo-collecting-local", candidate_model=CANDIDATE,
                                                   sample_rate=0.3, min_cases=400, expected_cases=2000)
        t["collecting"] = await admin.create("demo-collecting", team=SUPPORT_TEAM, candidate_model=CANDIDATE,
                                             sample_rate=0.5, expected_cases=2000)
        t["paused"] = await admin.create("demo-paused", team=OPS_TEAM, candidate_model=CANDIDATE)
        await _traffic(fake, tap, SUPPORT_TEAM, 0, 12, "support")
        await _traffic(fake, tap, OPS_TEAM, 0, 6, "ops")

        sent = 0

        async def all_decided() -> bool:
            # A batch at a time: the next once every case of the last has its outcome.
            nonlocal sent
            views = [await admin.trial(t[k]) for k in ("decided", "continue", "rejected", "promoted")]
            if all(v["verdict"]["code"] != "inconclusive" for v in views):
                return True
            if all(_counted(v) >= sent for v in views) and sent < 3000:
                await _traffic(fake, tap, TEAM, sent, 40, "demo")
                sent += 40
            return False

        await _until(all_decided, "the demo-team trials' decisions", timeout=90)
        decided(await admin.trial(t["decided"]))
        await _until(lambda: _idle(admin, t["paused"]), "the demo-ops trial's cases")
        paused = await admin.call("PUT", f"/v1/teams/{OPS_TEAM}/posture",
                                  json={"prompt_retention": False, "cut_over": False})
        if t["paused"] not in paused.get("paused_trials", []):
            raise DemoFailed(f"switching demo-ops's retention off paused {paused.get('paused_trials')}")

        promoted = await admin.call("POST", f"/v1/trials/{t['promoted']}/promote",
                                    json={"daily_cap_usd": 5.0, "sample_rate": 1.0, "min_judged": 20},
                                    headers={"Idempotency-Key": "demo-promote"})
        out.watch_id = promoted["watch"]["id"]
        # The new incumbent's served answers drop in quality: the sentinel (the old model) wins.
        served = 0

        async def fired() -> bool:
            nonlocal served
            alerts = (await admin.call("GET", "/v1/alerts"))["alerts"]
            if any(a["watch_id"] == out.watch_id for a in alerts):
                return True
            watch = await admin.call("GET", f"/v1/watches/{out.watch_id}")
            if watch["judged"] >= served and served < 1000:
                batch = [_served(TEAM, i, "drop", f"new incumbent answer {i} ⟨q=0.300⟩", model=PROMOTED)
                         for i in range(served, served + 20)]
                (await tap.post("/v1/exchanges", json=batch)).raise_for_status()
                served += 20
            return False

        await _until(fired, "the watch's alert", timeout=90)
        await corpus
        await _until(lambda: _reported(cp, set(t.values())), "the collector's view of every trial")
        return out
    finally:
        if not corpus.done():  # cancelled (a Ctrl-C) or failed: the corpus step ends before its client
            corpus.cancel()
            await asyncio.gather(corpus, return_exceptions=True)
        await tap.aclose()
        await admin.http.aclose()
        await cp.http.aclose()


def _counted(view: dict[str, Any]) -> int:
    """Exchanges with an outcome in the trial's funnel (every one it matched ends in exactly one)."""
    return sum(n for k, n in view["funnel"].items() if k != "in_flight" and isinstance(n, int))


async def _idle(admin: _Api, trial_id: str) -> bool:
    view = await admin.trial(trial_id)
    return bool(view["funnel"]["in_flight"] == 0 and view["verdict"]["cases"] > 0)


async def _reported(cp: _Api, trial_ids: set[str]) -> bool:
    listing = await cp.call("GET", "/v1/trials")
    return trial_ids <= {row["trial_id"] for row in listing["trials"]}


async def _corpus(cp: _Api, out: Explorable) -> None:
    """A dataset at the collector, a suite over it, an experiment of two arms run to completion,
    then an A/B comparison of the same two models over it, to its verdict."""
    rows = "\n".join(json.dumps({"input": f"{TOPICS[i % len(TOPICS)]} (item {i})", "expected": f"answer {i}"})
                     for i in range(DATASET_ITEMS))
    ds = await cp.call("POST", "/v1/datasets", params={"team": TEAM, "name": "support-questions", "format": "jsonl"},
                       content=rows.encode())
    out.dataset_id = ds["id"]
    suite = await cp.call("POST", "/v1/suites", json={"name": "support-pref", "dataset_id": ds["id"],
                                                      "dataset_version": 1,
                                                      "metrics": [{"name": "pref", "kind": "paired_judge"},
                                                                  {"name": "marker", "kind": "grader",
                                                                   "grader": {"type": "contains", "value": "⟨q="}},
                                                                  {"name": "cost", "kind": "cost"}]})
    body = {"suite_id": suite["id"], "repetitions": 1, "primary_metric": "pref",
            "arms": [{"name": "today", "model": INCUMBENT}, {"name": "next", "model": CANDIDATE}]}
    ready = await cp.call("POST", "/v1/comparisons/readiness", json=body)
    group = await cp.call("POST", "/v1/comparisons", json={**body, "readiness_token": ready["readiness_token"]},
                          headers={"Idempotency-Key": "demo-experiment"})
    out.experiment_id = group["id"]

    async def completed() -> bool:
        view = await cp.call("GET", f"/v1/comparisons/{out.experiment_id}")
        return bool(_status(view) == "completed")

    await _until(completed, "the experiment's run", timeout=90)
    ab = await cp.call("POST", "/v1/evaluations/comparisons", json={
        "suite_id": suite["id"], "baseline": {"type": "model", "ref": INCUMBENT, "version": ""},
        "candidate": {"type": "model", "ref": CANDIDATE, "version": ""}, "tolerance": 0.05})
    out.comparison_id = ab["id"]

    async def verdict() -> bool:
        view = await cp.call("GET", f"/v1/evaluations/comparisons/{out.comparison_id}")
        return view.get("verdict") is not None

    await _until(verdict, "the A/B comparison's verdict", timeout=90)


def _status(view: dict[str, Any]) -> str | None:
    run = view.get("run") or {}
    status = run.get("status") if isinstance(run, dict) else None
    return status if isinstance(status, str) else view.get("status")


def banner(out: Explorable, elapsed_s: float) -> str:
    t = out.trials
    site = "judged at the control plane" if out.control_plane_site else "judged by the sidecar (no cut-over)"
    links = [
        ("Adoptable, stopped on its decision", f"{out.sidecar_url}/console/trials/{t['decided']}"),
        ("Adoptable, still running (continue)", f"{out.sidecar_url}/console/trials/{t['continue']}"),
        ("Rejected", f"{out.sidecar_url}/console/trials/{t['rejected']}"),
        ("Adopted, its watch fired an alert", f"{out.sidecar_url}/console/watches/{out.watch_id}"),
        ("Collecting, judged by the sidecar", f"{out.sidecar_url}/console/trials/{t['collecting_local']}"),
        (f"Collecting, {site}", f"{out.sidecar_url}/console/trials/{t['collecting']}"),
        ("Paused (retention switched off)", f"{out.sidecar_url}/console/trials/{t['paused']}"),
        ("Experiment over a dataset", f"{out.collector_url}/console/experiments/{out.experiment_id}"),
        ("A/B comparison over the dataset", f"{out.collector_url}/console/comparisons?open={out.comparison_id}"),
        ("Compare models side by side", f"{out.sidecar_url}/console/compare"),
    ]
    width = max(len(label) for label, _ in links) + 2
    return "\n".join([
        f"ready in {elapsed_s:.1f}s — the demo keeps running until Ctrl-C.",
        "",
        f"sidecar console        {out.sidecar_url}/console/",
        f"control-plane console  {out.collector_url}/console/",
        "token (platform_admin with the content permission, valid 12 h; paste it into either sign-in form):",
        f"  {out.token}",
        "",
        *(f"  {label.ljust(width)}{url}" for label, url in links),
    ])


async def run_explorable(*, seed: int = 7, stop: asyncio.Event | None = None) -> int:
    """Start, populate, print the consoles and the token, and run until SIGINT/SIGTERM (or ``stop``)."""
    started = time.monotonic()
    stop = stop or asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    print("shadowtrial demo — SIMULATED models on a local fake provider; no real model is called.", flush=True)
    print("Starting a control-plane collector and a sidecar…", flush=True)
    # The terminal's Ctrl-C reaches the whole process group. The sidecar's engine process inherits
    # "ignore SIGINT" from its start here (an ignored signal stays ignored across exec; a blocked one
    # did not stay blocked), so the sidecar stops it in order instead of a traceback. The price: a
    # Ctrl-C during these first seconds is ignored.
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        with tempfile.TemporaryDirectory(prefix="shadowtrial-demo-") as tmp:
            async with FakeProvider(explore_models(), seed=seed) as fake:
                collector_path, sidecar_path, token = _configs(tmp, fake.base_url)
                collector_config = load_config(collector_path, {})
                async with CollectorServer(collector_config.collector, config=collector_config) as collector:
                    with open(sidecar_path) as fh:
                        text = fh.read().replace("COLLECTOR_URL", collector.url)
                    with open(sidecar_path, "w") as fh:
                        fh.write(text)
                    sidecar = Sidecar(load_config(sidecar_path, {}))
                    try:
                        await sidecar.start()
                    finally:
                        loop.add_signal_handler(signal.SIGINT, stop.set)
                    try:
                        print("Populating both consoles… (Ctrl-C stops the demo)", flush=True)
                        code = await _populate_then_wait(fake, sidecar, collector, token, stop, started)
                    finally:
                        await sidecar.stop()
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)
        signal.signal(signal.SIGINT, previous)
    print("the demo stopped.", flush=True)
    return code


async def _populate_then_wait(
    fake: FakeProvider, sidecar: Sidecar, collector: CollectorServer, token: str, stop: asyncio.Event, started: float,
) -> int:
    """Populate (a Ctrl-C meanwhile cancels it), print the banner, wait for the stop; the exit code."""
    def verdict(view: dict[str, Any]) -> None:
        rows = [*verdict_rows(view), ("wall time", f"{time.monotonic() - started:.1f}s")]
        print(f"\ntrial {view['id']}: {view['candidate_model']} (candidate) vs {view['incumbent_model']} "
              f"(incumbent), stopped on its decision\n", flush=True)
        print(table(rows, ("SIMULATED MODELS — verdict", "value")), flush=True)
        print("\nPopulating the rest (a watch that fires, an experiment, a comparison)…\n", flush=True)

    filling = asyncio.ensure_future(populate(fake, sidecar, collector, token, verdict))
    stopped = asyncio.ensure_future(stop.wait())
    try:
        await asyncio.wait({filling, stopped}, return_when=asyncio.FIRST_COMPLETED)
        if not filling.done():
            filling.cancel()
            print("\nstopped before the demo was ready.", flush=True)
            return 0
        try:
            out = filling.result()
        except DemoFailed as exc:
            print(f"shadowtrial demo: {exc}", file=sys.stderr, flush=True)
            return 1
        print(banner(out, time.monotonic() - started), flush=True)
        await stopped
        print("\nstopping…", flush=True)
        return 0
    finally:
        for task in (filling, stopped):
            task.cancel()
