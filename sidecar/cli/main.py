"""The ``shadowtrial`` command.

    shadowtrial serve [--config FILE]
    shadowtrial trials create --team T --incumbent M --candidate M --cap-usd X [...]
    shadowtrial trials list | show ID | stop ID
    shadowtrial live
    shadowtrial send FILE.jsonl | --simulate --team T [--rate N/s] [--count N] [--batch N] [--tap URL]
    shadowtrial teams posture show TEAM | set TEAM [--retention on|off] [--cut-over on|off] [--if-match REV]
    shadowtrial token --key FILE --alg ALG --sub S --audience A --issuer I [--role R ...] [--team T ...]
    shadowtrial keygen [--out DIR] [--kind ed25519|ec|rsa]
    shadowtrial demo
    shadowtrial fake-provider [--listen HOST:PORT]

Client commands talk to the admin API at ``--admin`` (default
``$SHADOWTRIAL_ADMIN_URL`` or http://127.0.0.1:8791) and send ``--token`` (default
``$SHADOWTRIAL_TOKEN``) as ``Authorization: Bearer``. The config file comes
from ``--config`` or ``$SHADOWTRIAL_CONFIG``; environment overrides are
``SHADOWTRIAL_<SECTION>__<KEY>``.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import sqlite3
import sys
from typing import TYPE_CHECKING, Any, Mapping, Sequence
from urllib.parse import quote, urlsplit

from sidecar.cli import compare as compare_cli
from sidecar.cli import corpus as corpus_cli
from sidecar.cli import experiments as experiments_cli
from sidecar.cli import send as send_cli
from sidecar.errors import ConfigError, StartupError
from sidecar.cli.watches import render_live
from sidecar.cli.render import render_trial, render_trial_list, utc
from sidecar.trial_words import IDEMPOTENCY_KEY, MAX_KEY_CHARS, STATUSES

if TYPE_CHECKING:
    import httpx

    from sidecar.config import Config

# httpx and asyncio are imported by the commands that use them: `shadowtrial --version` and
# the engine's process (which imports this module as its main) start without them.

DEFAULT_ADMIN = "http://127.0.0.1:8791"


LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


#: Libraries that write a line per HTTP request at INFO (httpx's client: "HTTP Request: ...").
QUIET_LOGGERS = ("httpx", "httpcore", "aiohttp.access")


def configure_logging(level: str) -> None:
    """The sidecar's log at ``level``, with the libraries of :data:`QUIET_LOGGERS` at WARNING
    or above, so no line per provider or API call reaches it below DEBUG.

    (Provider calls drive their httpx transport directly, without the client that logs;
    this keeps the log quiet should a client come back. The engine's process sets its own
    logging from the root's level.)
    """
    number = logging.getLevelName(level)
    logging.basicConfig(level=number, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    for name in QUIET_LOGGERS:
        logging.getLogger(name).setLevel(number if number <= logging.DEBUG else max(number, logging.WARNING))


# -- argument types: what cannot even be sent is refused here, the rest by the API --------------


def _finite(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"{text!r} is not a finite number")
    return value


def _key(text: str) -> str:
    if not 1 <= len(text) <= MAX_KEY_CHARS or not (text.isascii() and text.isprintable()):
        raise argparse.ArgumentTypeError(
            f"must be 1 to {MAX_KEY_CHARS} printable ASCII characters (letters, digits, punctuation, spaces)"
        )
    return text


def _trial_id(text: str) -> str:
    if not text:
        raise argparse.ArgumentTypeError("must not be empty")
    return text


#: ``trials create`` flags → where their value goes in the ``POST /v1/trials`` body.
CREATE_FIELDS: dict[str, tuple[str, ...]] = {
    "team": ("team",),
    "incumbent": ("incumbent_model",),
    "candidate": ("candidate_model",),
    "cap_usd": ("spend_cap_usd",),
    "sample_rate": ("sample_rate",),
    "route": ("route",),
    "gateway": ("gateway",),
    "expected_cases": ("expected_cases",),
    "tolerance": ("tolerance",),
    "min_cases": ("min_cases",),
    "on_decision": ("on_decision",),
    "audit_share": ("audit_share",),
    "max_tokens": ("max_tokens",),
    "judge_model": ("judge", "model"),
    "judge_rubric": ("judge", "rubric"),
    "judge_max_tokens": ("judge", "max_tokens"),
    "judge_temperature": ("judge", "temperature"),
    "candidate_price": ("candidate_price",),
    "judge_price": ("judge_price",),
    "incumbent_price": ("incumbent_price",),
    "replay_from": ("source", "from"),
    "replay_to": ("source", "to"),
    "sample_size": ("sample_size",),
    "segment": ("segments",),
    "segment_cap": ("segment_cap",),
    "segment_min_cases": ("segment_min_cases",),
}


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("shadowtrial")
    except PackageNotFoundError:  # run from a checkout that was never installed
        return "(not installed)"


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="shadowtrial", description="Shadow-traffic trials for LLM gateways.")
    p.add_argument("--version", action="version", version=f"shadowtrial {_version()}")
    sub = p.add_subparsers(dest="command", required=True)

    serve = sub.add_parser("serve", help="run the sidecar (tap + admin API)")
    serve.add_argument("--config", help="TOML config file (default $SHADOWTRIAL_CONFIG)")
    serve.add_argument("--log-level", default="INFO", type=str.upper, choices=LOG_LEVELS)

    coll = sub.add_parser("collector", help="run the reference uplink collector ([collector] table)")
    coll.add_argument("--config", help="TOML config file with a [collector] table (default $SHADOWTRIAL_CONFIG)")
    coll.add_argument("--log-level", default="INFO", type=str.upper, choices=LOG_LEVELS)

    demo = sub.add_parser("demo", help="run the whole loop on simulated models, in one command")
    demo.add_argument("--exchanges", type=int, default=4000, help="most exchanges the simulated gateway sends")
    demo.add_argument("--seed", type=int, default=7)
    demo.add_argument("--stay", "--hold", dest="stay", action=argparse.BooleanOptionalAction, default=None,
                      help="keep running until Ctrl-C with a sidecar and a control-plane collector, both consoles "
                           "populated (trials in every state, a watch that fired, a dataset and an experiment); "
                           "default: when stdout is a terminal")

    fake = sub.add_parser("fake-provider", help="serve the demo's simulated models on an OpenAI-compatible endpoint")
    fake.add_argument("--listen", default="127.0.0.1:8000", help="HOST:PORT (default 127.0.0.1:8000; port 0 picks one)")
    fake.add_argument("--seed", type=int, default=7)

    token = sub.add_parser(
        "token", help="mint a development admin token (JWT) from a local key",
        description="Print a JWT signed with a local private key (PEM) or HMAC secret file, for the demo, tests "
                    "and trying things; production tokens come from your identity provider. See docs/security.md.",
    )
    token.add_argument("--key", required=True, help="PEM private key, or the secret file for HS256/384/512")
    token.add_argument("--alg", required=True, help="signing algorithm, one the sidecar pins for this key (e.g. EdDSA)")
    token.add_argument("--kid", help="key id to name in the token's header")
    token.add_argument("--sub", required=True, help="the subject (who the token is for)")
    token.add_argument("--role", action="append", default=[], help="a role (repeatable)")
    token.add_argument("--team", action="append", default=[], help="a team (repeatable)")
    token.add_argument("--content", action="store_true", help="may read prompt and answer bodies")
    token.add_argument("--ttl", type=_finite, default=3600.0, help="seconds until it expires (default 3600)")
    token.add_argument("--audience", required=True, help="the sidecar's auth.audience")
    token.add_argument("--issuer", required=True, help="the sidecar's auth.issuer")

    keygen = sub.add_parser("keygen", help="write a development key pair for admin tokens")
    keygen.add_argument("--out", default=".", help="directory for NAME.key (private) and NAME.pub (default .)")
    keygen.add_argument("--name", default="admin")
    keygen.add_argument("--kind", choices=("ed25519", "ec", "rsa"), default="ed25519")

    def client(sp: argparse.ArgumentParser) -> None:
        sp.add_argument("--admin", default=None, help=f"admin API URL (default $SHADOWTRIAL_ADMIN_URL or {DEFAULT_ADMIN})")
        sp.add_argument("--token", default=None, help="admin bearer token (default $SHADOWTRIAL_TOKEN)")
        sp.add_argument("--json", action="store_true", help="print the raw JSON")

    trials = sub.add_parser("trials", help="create, list, show and stop trials")
    tsub = trials.add_subparsers(dest="action", required=True)
    create = tsub.add_parser(
        "create", help="create a trial",
        description="Create a trial (POST /v1/trials). Each option is the body field of the same name; "
                    "the API refuses values outside their documented ranges, naming the field.",
    )
    client(create)
    create.add_argument("--team", required=True)
    create.add_argument("--incumbent", required=True, help="the served model, as the gateway names it")
    create.add_argument("--candidate", required=True, help="the model to trial (alias or name)")
    create.add_argument("--cap-usd", type=_finite, required=True, help="hard spend cap of the trial, in US dollars")
    create.add_argument("--sample-rate", type=_finite, default=0.1, help="share of matching exchanges run (default 0.1)")
    create.add_argument("--route", help="only exchanges of this route")
    create.add_argument("--gateway", help="only exchanges from this gateway")
    create.add_argument("--expected-cases", type=int, help="the trial's expected size; tunes the decision rule")
    create.add_argument("--tolerance", type=_finite, help="equivalence margin on the win-rate scale (default 0.05)")
    create.add_argument("--min-cases", type=int, help="judged cases before any decision (default 20)")
    create.add_argument("--on-decision", choices=("stop", "continue"),
                        help="once decided: stop dispatching (default) or continue narrowing the bounds")
    create.add_argument("--audit-share", type=_finite,
                        help="share of cases judged again in swapped order (default: the config's judge.audit_share)")
    create.add_argument("--max-tokens", type=int,
                        help="output bound of a candidate call whose request set none (default: engine.default_max_tokens)")
    create.add_argument("--judge-model", help="judge model (default: the config's judge.model)")
    create.add_argument("--judge-rubric", help="judge rubric id (default: the config's judge.rubric)")
    create.add_argument("--judge-max-tokens", type=int, help="output bound of a judge call")
    create.add_argument("--judge-temperature", type=_finite, help="judge temperature (default 0)")
    for arm in ("candidate", "judge", "incumbent"):
        create.add_argument(
            f"--{arm}-price", nargs=2, type=_finite, metavar=("INPUT", "OUTPUT"),
            help=f"list price of the {arm} model in US dollars per million input and output tokens, "
                 "when the config and the price map have none",
        )
    create.add_argument(
        "--idempotency-key", type=_key,
        help="a key of your choosing for this create: running the command again with the same key and the same "
             "options prints the trial the first run created instead of creating another (the same key with other "
             "options is refused, 409). Without one, every run creates a new trial.",
    )
    create.add_argument("--replay-from", help="replay the retention window from this time (RFC 3339) instead of "
                                              "running on live traffic")
    create.add_argument("--replay-to", help="the end of the replayed window (RFC 3339, exclusive)")
    create.add_argument("--sample-size", type=int, help="replay at most this many exchanges of the window")
    create.add_argument("--segment", action="append",
                        help="also read the trial per value of this segment (repeatable): route, model, gateway, "
                             "length (a bucket of the prompt's length) or tag:NAME")
    create.add_argument("--segment-cap", type=int, help="segment values tracked (default 16; the rest pooled as other)")
    create.add_argument("--segment-min-cases", type=int,
                        help="judged cases per tracked segment value that sampling favours, within the cap")
    lst = tsub.add_parser("list", help="list trials")
    client(lst)
    lst.add_argument("--status", choices=STATUSES, help="only trials in this status")
    lst.add_argument("--team", help="only trials of this team")
    for name in ("show", "stop", "resume"):
        sp = tsub.add_parser(name, help=f"{name} a trial")
        client(sp)
        sp.add_argument("trial_id", type=_trial_id)

    compare_cli.add_parser(sub, client)
    send_cli.add_parser(sub)

    live = sub.add_parser("live", help="running trials, watches, alerts and evaluation spend")
    client(live)
    from sidecar.cli.watches import add_parsers

    add_parsers(sub, tsub, client, _finite, _key, _trial_id)

    teams = sub.add_parser("teams", help="teams' posture")
    teams_sub = teams.add_subparsers(dest="action", required=True)
    posture = teams_sub.add_parser("posture", help="show or set a team's posture (GET/PUT /v1/teams/TEAM/posture)")
    psub = posture.add_subparsers(dest="posture_action", required=True)
    show = psub.add_parser("show", help="retention, cut-over, each gateway's content uplink, the execution site")
    client(show)
    show.add_argument("team")
    pset = psub.add_parser(
        "set", help="set retention and/or cut-over",
        description="Set a team's prompt retention and cut-over (PUT). A setting left out keeps its current "
                    "value: the command reads the posture and writes over that revision (If-Match), so a "
                    "concurrent change is refused (412) rather than undone. Running trials the change moves "
                    "are paused posture_changed; the answer lists them.",
    )
    client(pset)
    pset.add_argument("team")
    pset.add_argument("--retention", choices=("on", "off"), help="prompt retention")
    pset.add_argument("--cut-over", dest="cut_over", choices=("on", "off"), help="cut over to control-plane execution")
    pset.add_argument("--if-match", dest="if_match", type=int, help="write only over this revision")
    corpus_cli.add_commands(sub, client)
    experiments_cli.add_commands(sub, client)
    return p


def _admin_url(args: argparse.Namespace, environ: Mapping[str, str]) -> str:
    return (args.admin or environ.get("SHADOWTRIAL_ADMIN_URL") or DEFAULT_ADMIN).rstrip("/")


def _trial_url(base: str, trial_id: str) -> str:
    """The trial's URL with its id as one path segment, whatever it contains (``../../v1/live``
    must not walk to another route; ``.`` and ``..`` alone are dot-segments unless encoded)."""
    return f"{base}/v1/trials/{_segment(trial_id)}"


def _segment(value: str) -> str:
    """``value`` as one URL path segment."""
    return value.replace(".", "%2E") if set(value) <= {"."} else quote(value, safe="")


#: How much of an answer that is not the admin API's JSON is quoted.
QUOTE_BYTES = 200


def _first_bytes(r: httpx.Response) -> str:
    text = r.content[:QUOTE_BYTES].decode("utf-8", "replace")
    return repr(text) + ("..." if len(r.content) > QUOTE_BYTES else "") if r.content else "an empty body"


def _call(method: str, url: str, **kw: Any) -> dict[str, Any]:
    import httpx

    try:
        r = httpx.request(method, url, timeout=30.0, **kw)
    except httpx.InvalidURL as exc:
        raise SystemExit(f"shadowtrial: {url} is not a usable admin API URL: {exc}") from None
    except httpx.HTTPError as exc:
        raise SystemExit(f"shadowtrial: cannot reach the admin API at {url}: {exc}") from None
    try:
        data = r.json() if r.content else {}
    except ValueError:
        data = None
    err = data.get("error") if isinstance(data, dict) else None
    if r.status_code >= 400 and isinstance(err, dict) and err.get("code"):
        field = f" (field {err['field']})" if err.get("field") else ""
        raise SystemExit(f"shadowtrial: {r.status_code} {err['code']}: {err.get('message', '')}{field}")
    if r.status_code >= 500:
        # The server (or a proxy in front of it) failed; say so, with what it answered.
        raise SystemExit(f"shadowtrial: {r.status_code} {r.reason_phrase} from {url}: the server failed; "
                         f"it answered {_first_bytes(r)}")
    if not isinstance(data, dict) or r.status_code >= 400:
        # Some other server (a wrong port, a proxy's page): say so rather than crash.
        raise SystemExit(
            f"shadowtrial: {r.status_code} {r.reason_phrase} from {url}: the answer is not the admin API's JSON "
            f"(is --admin / $SHADOWTRIAL_ADMIN_URL the admin listener?); it begins {_first_bytes(r)}"
        )
    return data


def create_body(args: argparse.Namespace) -> dict[str, Any]:
    """The ``POST /v1/trials`` body of ``trials create``: every option given, in the API's shape."""
    body: dict[str, Any] = {}
    for dest, path in CREATE_FIELDS.items():
        value = getattr(args, dest)
        if value is None:
            continue
        if dest.endswith("_price"):
            value = {"input_per_mtok_usd": value[0], "output_per_mtok_usd": value[1]}
        target = body
        for key in path[:-1]:
            target = target.setdefault(key, {})
        target[path[-1]] = value
    if "source" in body:
        body["source"]["kind"] = "replay"
    return body


def _auth_headers(args: argparse.Namespace, environ: Mapping[str, str]) -> dict[str, str]:
    token = (args.token or environ.get("SHADOWTRIAL_TOKEN") or "").strip()
    return {"Authorization": f"Bearer {token}"} if token else {}


def _client(args: argparse.Namespace, environ: Mapping[str, str]) -> int:
    base = _admin_url(args, environ)
    auth = _auth_headers(args, environ)
    if args.command == "live":
        data = _call("GET", f"{base}/v1/live", headers=auth)
        print(json.dumps(data, indent=2) if args.json else render_live(data))
        return 0
    if args.command == "teams":
        return _posture_command(args, base, auth)
    if args.command == "compare":
        return compare_cli.run(args, base, auth)
    if args.command == "datasets":
        return corpus_cli.run(args, base, auth, environ, _call)
    if args.command == "experiments":
        return experiments_cli.run(args, base, auth, environ, _call)
    from sidecar.cli.watches import run

    done = run(args, base, auth, _call, _segment)
    if done is not None:
        return done
    if args.action == "create":
        headers = {IDEMPOTENCY_KEY: args.idempotency_key} if args.idempotency_key else {}
        data = _call("POST", f"{base}/v1/trials", json=create_body(args), headers=headers | auth)
    elif args.action == "list":
        params = {k: v for k, v in (("status", args.status), ("team", args.team)) if v is not None}
        data = _call("GET", f"{base}/v1/trials", params=params, headers=auth)
        print(json.dumps(data, indent=2) if args.json else render_trial_list(data.get("trials", [])))
        return 0
    elif args.action == "show":
        data = _call("GET", _trial_url(base, args.trial_id), headers=auth)
    else:  # stop, resume
        data = _call("POST", _trial_url(base, args.trial_id) + f"/{args.action}", headers=auth)
    print(json.dumps(data, indent=2) if args.json else render_trial(data))
    return 0


def _posture_command(args: argparse.Namespace, base: str, auth: dict[str, str]) -> int:
    url = f"{base}/v1/teams/{_segment(args.team)}/posture"
    if args.posture_action == "show":
        data = _call("GET", url, headers=auth)
    else:
        if args.retention is None and args.cut_over is None:
            raise SystemExit("shadowtrial: give --retention and/or --cut-over")
        revision = args.if_match
        current: dict[str, Any] = {}
        if args.retention is None or args.cut_over is None or revision is None:
            current = _call("GET", url, headers=auth)
            revision = current.get("revision") if revision is None else revision
        body = {
            "prompt_retention": (args.retention == "on") if args.retention else current.get("prompt_retention"),
            "cut_over": (args.cut_over == "on") if args.cut_over else current.get("cut_over"),
        }
        data = _call("PUT", url, json=body, headers=auth | {"If-Match": f'"{revision}"'})
    print(json.dumps(data, indent=2) if args.json else render_posture(data))
    return 0


def render_posture(data: Mapping[str, Any]) -> str:
    """A team's posture as text."""
    def on(value: Any) -> str:
        return "on" if value is True else "off" if value is False else "?"

    lines = [
        f"team {data.get('team')}  (revision {data.get('revision')}"
        f"{'' if data.get('stored') else ', from config defaults'})",
        f"  prompt retention  {on(data.get('prompt_retention'))}",
        f"  cut over          {on(data.get('cut_over'))}",
        f"  execution site    {data.get('execution_site')}",
        *([f"  updated           {utc(data['updated_at'])}"
           f"{' by ' + str(data['updated_by']) if data.get('updated_by') else ''}"] if data.get("updated_at") else []),
        f"  gateways (stop counting after {data.get('stale_after_seconds')} s unheard):",
    ]
    gateways = data.get("gateways") or []
    for g in gateways:
        lines.append(f"    {g.get('gateway')}: content uplink {on(g.get('content_uplink'))}, last seen "
                     f"{utc(g.get('last_seen'))}{'' if g.get('live') else ' (stale: not counted)'}")
    if not gateways:
        lines.append("    none reported (the site is local)")
    for name, feature in (data.get("features") or {}).items():
        if not feature.get("available"):
            lines.append(f"  {name} unavailable: {feature.get('reason')}")
    if data.get("paused_trials"):
        lines.append(f"  paused posture_changed: {', '.join(data['paused_trials'])}")
    return "\n".join(lines)


# -- start-up failures: one line naming the setting, exit status 2 ------------------------------


def startup_error(exc: BaseException, config: Config) -> str | None:
    """One line saying why ``serve`` could not start, naming the setting and its value, or
    ``None`` for an exception that is not a known start-up failure (its traceback is shown)."""
    from sidecar.engine.process import EngineStartError

    if isinstance(exc, ConfigError):  # read after the config: the price map
        map_file = config.prices.map_file
        return f"config: prices.map_file: {exc}" if map_file and map_file in str(exc) else f"config: {exc}"
    if isinstance(exc, StartupError):
        return str(exc)
    store = config.store
    if store.url.startswith(("postgresql://", "postgres://")):
        if isinstance(exc, OSError) or type(exc).__module__.partition(".")[0] == "asyncpg":
            return f"store.url {_redact(store.url)}: cannot open the PostgreSQL store: {_one_line(exc)}"
    elif isinstance(exc, sqlite3.Error):
        path = store.url.removeprefix("sqlite://") if store.url else store.path
        return f"store.path {path!r}: cannot open the SQLite store: {_one_line(exc)}{_why_not_sqlite(path)}"
    if isinstance(exc, EngineStartError):
        return f"{_one_line(exc)} (store {_redact(store.location)!r})"
    return None


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__


def _redact(url: str) -> str:
    """A store URL without its password."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.rpartition("@")
    user = netloc[0].partition(":")[0]
    return parts._replace(netloc=f"{user}:***@{netloc[2]}").geturl()


def _why_not_sqlite(path: str) -> str:
    """What the file system says about ``path``, as SQLite's own message does not."""
    parent = os.path.dirname(os.path.abspath(path))
    if os.path.isdir(path):
        return "; it is a directory"
    if not os.path.exists(parent):
        return f"; directory {parent!r} does not exist"
    if not os.path.isdir(parent):
        return f"; {parent!r} is not a directory"
    if os.path.exists(path):
        try:
            os.close(os.open(path, os.O_RDWR))
        except OSError as err:
            return f"; {err.strerror or err}"
        return ""
    if not os.access(parent, os.W_OK | os.X_OK):
        return f"; directory {parent!r} is not writable"
    return f"; no file can be created in {parent!r}"


def _auth_command(args: argparse.Namespace) -> int:
    from sidecar.auth.errors import KeyLoadError
    from sidecar.auth.mint import KIND_ALGORITHM, generate_key_pair, load_signing_key, mint

    if args.command == "keygen":
        private, public = generate_key_pair(args.out, kind=args.kind, name=args.name)
        print(f"wrote {private} (private: keep it to mint tokens) and {public} (public: the sidecar's key)")
        print(f'\n[[auth.keys]]\npath = "{public}"\nalgorithms = ["{KIND_ALGORITHM[args.kind]}"]\nkid = "{args.name}"')
        return 0
    if args.ttl <= 0:
        print("shadowtrial: --ttl must be positive", file=sys.stderr)
        return 2
    try:
        key = load_signing_key(args.key, args.alg)
        print(mint(key=key, algorithm=args.alg, kid=args.kid, subject=args.sub, audience=args.audience,
                   issuer=args.issuer, roles=args.role, teams=args.team, content=args.content, ttl_s=args.ttl))
    except KeyLoadError as exc:
        print(f"shadowtrial: {exc}", file=sys.stderr)
        return 2
    except Exception as exc:  # PyJWT or cryptography refusing this key for this algorithm
        print(f"shadowtrial: --key {args.key!r} cannot sign {args.alg}: {type(exc).__name__}", file=sys.stderr)
        return 2
    return 0


def _config(args: argparse.Namespace, env: Mapping[str, str]) -> Config | None:
    """Logging set up, then the config ``serve`` and ``collector`` run on (None: refused, said in one line)."""
    from sidecar.config import load_config

    configure_logging(args.log_level)
    try:
        return load_config(args.config or env.get("SHADOWTRIAL_CONFIG"), env)
    except ConfigError as exc:
        print(f"shadowtrial: config: {exc}", file=sys.stderr)
        return None


def _collector(args: argparse.Namespace, env: Mapping[str, str]) -> int:
    import asyncio

    from sidecar.collector.server import serve_collector
    from sidecar.errors import StartupError

    config = _config(args, env)
    if config is None:
        return 2
    try:
        asyncio.run(serve_collector(config))
    except StartupError as exc:
        print(f"shadowtrial: {exc}", file=sys.stderr)
        return 2
    return 0


#: The exit status after a reader closed the pipe early (``... --json | head -1``): a shell's
#: status for a process SIGPIPE ended (128 + 13).
EXIT_PIPE_CLOSED = 141


def main(argv: Sequence[str] | None = None, environ: Mapping[str, str] | None = None) -> int:
    """Run one command; its exit status. A reader that closes stdout early (``| head``) ends it
    quietly, without a traceback (the output is flushed here, so no error waits for exit)."""
    try:
        status = _main(argv, environ)
        sys.stdout.flush()
    except BrokenPipeError:
        # Nothing more can be written, and the interpreter's own flush at exit must not try:
        # point stdout at /dev/null (Python's documented recipe for SIGPIPE).
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
        return EXIT_PIPE_CLOSED
    return status


def _main(argv: Sequence[str] | None, environ: Mapping[str, str] | None) -> int:
    env = os.environ if environ is None else environ
    args = _parser().parse_args(argv)
    if args.command == "serve":
        import asyncio

        from sidecar.app import serve

        config = _config(args, env)
        if config is None:
            return 2
        try:
            asyncio.run(serve(config))
        except Exception as exc:
            message = startup_error(exc, config)
            if message is None:
                raise
            logging.getLogger("shadowtrial").debug("start-up failed", exc_info=exc)
            print(f"shadowtrial: {message}", file=sys.stderr)
            return 2
        return 0
    if args.command == "collector":
        return _collector(args, env)
    if args.command == "fake-provider":
        import asyncio

        from sidecar.demo.scenario import serve_fake_provider

        try:
            asyncio.run(serve_fake_provider(args.listen, seed=args.seed))
        except ValueError as exc:
            print(f"shadowtrial: {exc}", file=sys.stderr)
            return 2
        return 0
    if args.command == "send":
        return send_cli.run(args, env)
    if args.command in ("token", "keygen"):
        return _auth_command(args)
    if args.command == "demo":
        import asyncio

        from sidecar.demo.scenario import run_demo

        stay = args.stay if args.stay is not None else sys.stdout.isatty()
        if stay:
            from sidecar.demo.explore import run_explorable

            return asyncio.run(run_explorable(seed=args.seed))
        return asyncio.run(run_demo(exchanges=args.exchanges, seed=args.seed))
    return _client(args, env)


if __name__ == "__main__":
    raise SystemExit(main())
