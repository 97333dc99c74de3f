"""``shadowtrial experiments check|start|show|compare``: comparison groups from the command line.

The corpus API is served by the control plane (``--url``, default ``$SHADOWTRIAL_CORPUS_URL``,
else the admin URL), as for ``shadowtrial datasets``.

- ``check FILE`` — readiness of the group described in FILE (the body of
  ``POST /v1/comparisons``): arms as resolved, what differs beyond the model, planned
  invocations, the spend cap, problems. Read-only; no model is called.
- ``start FILE [--key KEY] [--follow]`` — check, then start with the readiness token under an
  ``Idempotency-Key`` (default: derived from the file's content, so running the same start
  again after a lost answer returns the same group); ``--follow`` shows progress until it ends.
- ``show ID [--follow]`` — progress, per-arm denominators, spend and the results in corpus
  wording.
- ``compare FILE [--follow]`` — an A/B comparison (the body of
  ``POST /v1/evaluations/comparisons``); ``compare --id ID`` shows one.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time
from pathlib import Path
from typing import Any, Callable, Mapping

Call = Callable[..., dict[str, Any]]
FINAL = ("completed", "cap_reached", "starter_unauthorized")  # the run ended (a revoked starter ends it)
#: How often ``--follow`` asks for progress.
FOLLOW_INTERVAL_S = 1.0


def add_commands(sub: Any, client: Callable[[argparse.ArgumentParser], None]) -> None:
    exp = sub.add_parser("experiments", help="check, start, show and compare corpus experiments")
    esub = exp.add_subparsers(dest="action", required=True)
    check = esub.add_parser("check", help="readiness of a comparison group (no model is called)")
    check.add_argument("file", help="the group as JSON (suite_id, arms, repetitions, primary_metric, ...)")
    start = esub.add_parser("start", help="check, then start a comparison group")
    start.add_argument("file")
    start.add_argument("--key", help="Idempotency-Key (default: from the file's content)")
    show = esub.add_parser("show", help="a group's progress, denominators, spend and results")
    show.add_argument("comparison_id")
    compare = esub.add_parser("compare", help="an A/B comparison of a baseline and a candidate on a suite")
    compare.add_argument("file", nargs="?", help="the comparison as JSON (suite_id, baseline, candidate, ...)")
    compare.add_argument("--id", dest="comparison_id", help="show this A/B comparison instead")
    for sp in (start, show, compare):
        sp.add_argument("--follow", action="store_true", help="show progress until the run ends")
    for sp in (check, start, show, compare):
        client(sp)
        sp.add_argument("--url", default=None, help="corpus API URL (default $SHADOWTRIAL_CORPUS_URL, else the admin URL)")


def _body(path: str) -> tuple[bytes, Any]:
    try:
        raw = Path(path).read_bytes()
    except OSError as exc:
        raise SystemExit(f"shadowtrial: cannot read {path!r}: {exc.strerror or exc}") from None
    try:
        return raw, json.loads(raw)
    except ValueError as exc:
        raise SystemExit(f"shadowtrial: {path!r} is not JSON: {exc}") from None


def _usd(micros: Any) -> str:
    return "unknown" if micros is None else f"${micros / 1_000_000:,.4f}"


def render_readiness(r: Mapping[str, Any]) -> str:
    lines = [f"suite {r['suite']['id']} v{r['suite']['version']} · {r['items']} items × {r['repetitions']} "
             f"repetitions · primary metric {r['primary_metric']} · corpus evidence"]
    for arm in r["arms"]:
        res = arm.get("resolved") or {}
        lines.append(f"  arm {arm['name']}: {arm['model']} → {res.get('provider', '?')}/{res.get('upstream_model', '?')}"
                     f" prompt {arm['prompt_hash'] or '-'} settings {json.dumps(arm['settings'], sort_keys=True)}")
    for d in r["differences"]:
        lines.append(f"  differs beyond the model: {d['setting']} = {d['values']}")
    planned = r["planned"]
    lines.append(f"  planned invocations: {planned['group_total']:,} (limit {planned['limit']:,} per arm; "
                 + ", ".join(f"{p['arm']} {p['total']:,}" for p in planned["per_arm"]) + ")")
    spend = r.get("spend") or {}
    lines.append(f"  spend cap {_usd(spend.get('cap_micros'))} (worst case {_usd(spend.get('worst_case_micros'))}, "
                 f"list prices)")
    lines.append(f"  admission: {'admitted' if r['admission']['admitted'] else 'refused'}")
    for p in r["problems"]:
        lines.append(f"  problem {p['code']} at {p['field']}: {p['message']}")
    lines.append(f"  readiness token {r['readiness_token']}")
    return "\n".join(lines)


def progress_line(g: Mapping[str, Any]) -> str:
    run = g.get("run")
    if not run:
        return f"{g['id']} {g['status']}: waiting for the runner"
    p = run["progress"]
    arms = " · ".join(f"{a['arm']} {a['generation']['completed']}/{a['generation']['planned']}"
                      + (" (cancelled)" if a["cancelled"] else "") for a in run["arms"])
    return (f"{g['id']} {g['status']}: items {p['items_done']}/{p['items']} · {arms} · spend "
            f"{_usd(run['spend']['known_micros'])} ({run['spend']['coverage']})")


def render_group(g: Mapping[str, Any]) -> str:
    lines = [progress_line(g)]
    run = g.get("run")
    if not run:
        return lines[0]
    for a in run["arms"]:
        gen, grading = a["generation"], a["grading"]
        lines.append(f"  arm {a['arm']}: generated {gen['completed']}/{gen['planned']} (failed {gen['failed']}, "
                     f"indeterminate {gen['invocation_indeterminate']}, in flight {gen['in_flight']}, not started "
                     f"{gen['not_started']}); graded {grading['graded']}/{grading['completed_generations']}")
        for c in a["coverage"]:
            cov = "-" if c["coverage"] is None else f"{c['coverage']:.0%}"
            lines.append(f"    {c['metric']}: scored {c['scored']} of {c['eligible']} eligible "
                         f"({c['not_applicable']} not applicable) · coverage {cov}")
    ledger = run["spend"].get("ledger", {})
    lines.append(f"  spend {_usd(run['spend']['known_micros'])} known ({run['spend']['coverage']}, "
                 f"{run['spend']['basis']}); cap {_usd(ledger.get('cap_micros'))}, held "
                 f"{_usd(ledger.get('spent_micros'))}")
    for r in run["results"]:
        if r["code"] is None:
            lines.append(f"  {r['arm']} vs {r['baseline_arm']} · {r['metric']}: categorical {r['distribution']}")
            continue
        estimate = "-" if r["estimate"] is None else f"{r['estimate']:+.3f}"
        if not r.get("final", True):
            # Issue 23, item 3: read after every item, a fixed-sample interval is not a 95% one.
            lines.append(f"  {r['arm']} vs {r['baseline_arm']} · {r['metric']}: no direction until the run "
                         f"completes (Δ so far {estimate}, {r['paired_items']} items)")
            continue
        interval = ("small sample" if r["interval"] is None and r.get("small_sample", True)
                    else "none" if r["interval"] is None
                    else f"[{r['interval'][0]:.3f}, {r['interval'][1]:.3f}]")
        note = f"; {r['interval_note']}" if r.get("interval_note") and r["interval"] is None else ""
        lines.append(f"  {r['arm']} vs {r['baseline_arm']} · {r['metric']}: {r['wording']} "
                     f"(Δ {estimate}, 95% {interval}, {r['paired_items']} items{note})")
    return "\n".join(lines)


def _side(s: Mapping[str, Any]) -> str:
    return f"{s['type']} {s['ref']}" + (f"@{s['version']}" if s.get("version") else "")


def _num(v: float | None) -> str:
    return "-" if v is None else f"{v:.4g}"


def render_ab(c: Mapping[str, Any]) -> str:
    side, fmt = _side, _num
    lines = [f"{c['id']} {c['status']}: {side(c['baseline'])} vs {side(c['candidate'])} on suite {c['suite_id']} "
             f"(tolerance {c['tolerance']}) · verdict {c.get('verdict') or 'pending'}"]
    for m in c.get("metrics", []):
        lines.append(f"  {m['metric']}: baseline {fmt(m['baseline'])} candidate {fmt(m['candidate'])} "
                     f"delta {fmt(m['delta'])} ({m['comparator']}, threshold {fmt(m['threshold'])})"
                     + ("" if m.get("applicable", True) else " — not applicable"))
    return "\n".join(lines)


def _follow(get: Callable[[], dict[str, Any]], line: Callable[[Mapping[str, Any]], str],
            done: Callable[[Mapping[str, Any]], bool]) -> dict[str, Any]:
    tty = sys.stdout.isatty()
    while True:
        data = get()
        text = line(data)
        if tty:
            sys.stdout.write("\r\033[K" + text)
            sys.stdout.flush()
        else:
            print(text, flush=True)
        if done(data):
            if tty:
                sys.stdout.write("\n")
            return data
        time.sleep(FOLLOW_INTERVAL_S)  # a progress display's pace, not a synchronisation


def run(args: argparse.Namespace, admin_base: str, auth: dict[str, str], environ: Mapping[str, str], call: Call) -> int:
    base = (args.url or environ.get("SHADOWTRIAL_CORPUS_URL") or admin_base).rstrip("/")

    def out(data: Any, text: Callable[[Any], str]) -> None:
        print(json.dumps(data, indent=2) if args.json else text(data))

    def group(cid: str) -> dict[str, Any]:
        return call("GET", f"{base}/v1/comparisons/{cid}", headers=auth)

    if args.action == "check":
        _, body = _body(args.file)
        out(call("POST", f"{base}/v1/comparisons/readiness", json=body, headers=auth), render_readiness)
        return 0
    if args.action == "start":
        raw, body = _body(args.file)
        ready = call("POST", f"{base}/v1/comparisons/readiness", json=body, headers=auth)
        key = args.key or "cli-" + hashlib.sha256(raw).hexdigest()[:32]
        started = call("POST", f"{base}/v1/comparisons", json={**body, "readiness_token": ready["readiness_token"]},
                       headers={**auth, "Idempotency-Key": key})
        if not args.json:
            print(f"started {started['id']} ({started['status']}), request key {key}")
        if args.follow and not args.json:
            print(render_group(_follow(lambda: group(started["id"]), progress_line,
                                       lambda g: g["status"] in FINAL)))
        elif args.json:
            print(json.dumps(started, indent=2))
        return 0
    if args.action == "show":
        if args.follow and not args.json:
            print(render_group(_follow(lambda: group(args.comparison_id), progress_line,
                                       lambda g: g["status"] in FINAL)))
        else:
            out(group(args.comparison_id), render_group)
        return 0
    if args.comparison_id:
        cid = args.comparison_id
    else:
        if not args.file:
            raise SystemExit("shadowtrial: experiments compare needs a FILE (or --id ID)")
        _, body = _body(args.file)
        cid = call("POST", f"{base}/v1/evaluations/comparisons", json=body, headers=auth)["id"]

    def ab() -> dict[str, Any]:
        return call("GET", f"{base}/v1/evaluations/comparisons/{cid}", headers=auth)

    if args.follow and not args.json:
        print(render_ab(_follow(ab, lambda c: f"{c['id']} {c['status']}", lambda c: c.get("verdict") is not None)))
    else:
        out(ab(), render_ab)
    return 0
