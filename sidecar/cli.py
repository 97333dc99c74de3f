"""The ``shadowtrial`` command.

    shadowtrial serve [--config FILE]
    shadowtrial trials create --team T --incumbent M --candidate M --cap-usd X [...]
    shadowtrial trials list | show ID | stop ID
    shadowtrial live
    shadowtrial demo
    shadowtrial fake-provider [--listen HOST:PORT]

Client commands talk to the admin API at ``--admin`` (default
``$SHADOWTRIAL_ADMIN_URL`` or http://127.0.0.1:8791). The config file comes
from ``--config`` or ``$SHADOWTRIAL_CONFIG``; environment overrides are
``SHADOWTRIAL_<SECTION>__<KEY>``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import sys
import uuid
from typing import Any, Mapping, Sequence

import httpx

from sidecar.errors import ConfigError
from sidecar.render import render_live, render_trial, render_trial_list

DEFAULT_ADMIN = "http://127.0.0.1:8791"


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="shadowtrial", description="Shadow-traffic trials for LLM gateways.")
    sub = p.add_subparsers(dest="command", required=True)

    serve = sub.add_parser("serve", help="run the sidecar (tap + admin API)")
    serve.add_argument("--config", help="TOML config file (default $SHADOWTRIAL_CONFIG)")
    serve.add_argument("--log-level", default="INFO")

    demo = sub.add_parser("demo", help="run the whole loop on simulated models, in one command")
    demo.add_argument("--exchanges", type=int, default=4000, help="most exchanges the simulated gateway sends")
    demo.add_argument("--seed", type=int, default=7)

    fake = sub.add_parser("fake-provider", help="serve the demo's simulated models on an OpenAI-compatible endpoint")
    fake.add_argument("--listen", default="127.0.0.1:8000", help="HOST:PORT (default 127.0.0.1:8000; port 0 picks one)")
    fake.add_argument("--seed", type=int, default=7)

    def client(sp: argparse.ArgumentParser) -> None:
        sp.add_argument("--admin", default=None, help=f"admin API URL (default $SHADOWTRIAL_ADMIN_URL or {DEFAULT_ADMIN})")
        sp.add_argument("--json", action="store_true", help="print the raw JSON")

    trials = sub.add_parser("trials", help="create, list, show and stop trials")
    tsub = trials.add_subparsers(dest="action", required=True)
    create = tsub.add_parser("create", help="create a trial")
    client(create)
    create.add_argument("--team", required=True)
    create.add_argument("--incumbent", required=True, help="the served model, as the gateway names it")
    create.add_argument("--candidate", required=True, help="the model to trial (alias or name)")
    create.add_argument("--cap-usd", type=float, required=True, help="hard spend cap of the trial, in US dollars")
    create.add_argument("--sample-rate", type=float, default=0.1)
    create.add_argument("--route")
    create.add_argument("--gateway")
    create.add_argument("--expected-cases", type=int)
    create.add_argument("--tolerance", type=float)
    create.add_argument("--judge-model")
    create.add_argument("--idempotency-key", help="defaults to a fresh key, so a retried command cannot create two trials")
    for name in ("list",):
        client(tsub.add_parser(name, help=f"{name} trials"))
    for name in ("show", "stop"):
        sp = tsub.add_parser(name, help=f"{name} a trial")
        client(sp)
        sp.add_argument("trial_id")

    live = sub.add_parser("live", help="running trials, watches, alerts and evaluation spend")
    client(live)
    return p


def _admin_url(args: argparse.Namespace, environ: Mapping[str, str]) -> str:
    return (args.admin or environ.get("SHADOWTRIAL_ADMIN_URL") or DEFAULT_ADMIN).rstrip("/")


def _call(method: str, url: str, **kw: Any) -> dict[str, Any]:
    try:
        r = httpx.request(method, url, timeout=30.0, **kw)
    except httpx.HTTPError as exc:
        raise SystemExit(f"shadowtrial: cannot reach the admin API at {url}: {exc}") from None
    try:
        data = r.json() if r.content else {}
    except ValueError:
        data = None
    if not isinstance(data, dict):
        # Some other server (a proxy's error page, a wrong port): say so rather than crash.
        raise SystemExit(
            f"shadowtrial: {r.status_code} {r.reason_phrase} from {url}: the answer is not the admin API's JSON "
            "(is --admin / $SHADOWTRIAL_ADMIN_URL the admin listener?)"
        )
    if r.status_code >= 400:
        err = data.get("error")
        err = err if isinstance(err, dict) else {}
        field = f" (field {err['field']})" if err.get("field") else ""
        raise SystemExit(f"shadowtrial: {r.status_code} {err.get('code', '')}: {err.get('message', r.text)}{field}")
    return data


def _client(args: argparse.Namespace, environ: Mapping[str, str]) -> int:
    base = _admin_url(args, environ)
    if args.command == "live":
        data = _call("GET", f"{base}/v1/live")
        print(json.dumps(data, indent=2) if args.json else render_live(data))
        return 0
    if args.action == "create":
        body: dict[str, Any] = {
            "team": args.team,
            "incumbent_model": args.incumbent,
            "candidate_model": args.candidate,
            "spend_cap_usd": args.cap_usd,
            "sample_rate": args.sample_rate,
        }
        for key, value in (("route", args.route), ("gateway", args.gateway), ("expected_cases", args.expected_cases),
                           ("tolerance", args.tolerance)):
            if value is not None:
                body[key] = value
        if args.judge_model:
            body["judge"] = {"model": args.judge_model}
        key = args.idempotency_key or uuid.uuid4().hex
        data = _call("POST", f"{base}/v1/trials", json=body, headers={"Idempotency-Key": key})
    elif args.action == "list":
        data = _call("GET", f"{base}/v1/trials")
        print(json.dumps(data, indent=2) if args.json else render_trial_list(data["trials"]))
        return 0
    elif args.action == "show":
        data = _call("GET", f"{base}/v1/trials/{args.trial_id}")
    else:
        data = _call("POST", f"{base}/v1/trials/{args.trial_id}/stop")
    print(json.dumps(data, indent=2) if args.json else render_trial(data))
    return 0


def main(argv: Sequence[str] | None = None, environ: Mapping[str, str] | None = None) -> int:
    env = os.environ if environ is None else environ
    args = _parser().parse_args(argv)
    if args.command == "serve":
        from sidecar.app import serve
        from sidecar.config import load_config

        logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
        try:
            config = load_config(args.config or env.get("SHADOWTRIAL_CONFIG"), env)
        except ConfigError as exc:
            print(f"shadowtrial: config: {exc}", file=sys.stderr)
            return 2
        asyncio.run(serve(config))
        return 0
    if args.command == "fake-provider":
        from sidecar.demo.scenario import serve_fake_provider

        try:
            asyncio.run(serve_fake_provider(args.listen, seed=args.seed))
        except ValueError as exc:
            print(f"shadowtrial: {exc}", file=sys.stderr)
            return 2
        return 0
    if args.command == "demo":
        from sidecar.demo.scenario import run_demo

        return asyncio.run(run_demo(exchanges=args.exchanges, seed=args.seed))
    return _client(args, env)


if __name__ == "__main__":
    raise SystemExit(main())
