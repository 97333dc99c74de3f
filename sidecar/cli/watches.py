"""The CLI of promotion, watches, alerts and results (``shadowtrial trials promote``,
``shadowtrial watches …``, ``shadowtrial alerts …``, ``shadowtrial results``).

Added to :mod:`sidecar.cli.main`'s parser by :func:`add_parsers`; :func:`run` answers a parsed
command of these, or returns None for another.
"""

from __future__ import annotations

import argparse
import json
from typing import Any, Callable

from sidecar.cli.render import count, pct, table, usd

Call = Callable[..., dict[str, Any]]
Client = Callable[[argparse.ArgumentParser], None]


def add_parsers(sub: Any, tsub: Any, client: Client, finite: Callable[[str], float], key: Callable[[str], str],
                trial_id: Callable[[str], str]) -> None:
    promote = tsub.add_parser(
        "promote", help="promote an Adoptable trial: the candidate becomes the incumbent, and a watch starts",
        description="POST /v1/trials/ID/promote. Refused (409 promotion_refused, with a reason) unless the trial's "
                    "traffic verdict is Adoptable. The watch dispatches the replaced model as a sentinel at a low "
                    "sample rate, under its own spend cap per UTC day.",
    )
    client(promote)
    promote.add_argument("trial_id", type=trial_id)
    promote.add_argument("--daily-cap-usd", type=finite, required=True, help="the sentinel's spend cap per UTC day")
    promote.add_argument("--sample-rate", type=finite, help="the sentinel's share of matching exchanges (default 0.01)")
    promote.add_argument("--min-judged", type=int, help="judged cases before the detector may fire (default 30)")
    promote.add_argument("--note", help="a note kept with the promotion record")
    promote.add_argument("--acknowledge-segment", action="append", metavar="KEY",
                         help="a Rejected segment of the trial (tag:tier=reasoning) promoted over anyway; repeat for "
                              "each: a trial Rejected on a segment is promoted only with all of them acknowledged")
    promote.add_argument("--idempotency-key", type=key,
                         help="retrying with the same key and options prints the first watch; other options: 409")

    watches = sub.add_parser("watches", help="list, show and stop watches (they are created by promotion)")
    wsub = watches.add_subparsers(dest="action", required=True)
    wl = wsub.add_parser("list", help="list watches")
    client(wl)
    wl.add_argument("--status", choices=("active", "stopped"))
    for name in ("show", "stop"):
        sp = wsub.add_parser(name, help=f"{name} a watch")
        client(sp)
        sp.add_argument("watch_id", type=trial_id)

    alerts = sub.add_parser("alerts", help="list, acknowledge and resolve alerts")
    asub = alerts.add_subparsers(dest="action", required=True)
    al = asub.add_parser("list", help="list alerts, firing first")
    client(al)
    al.add_argument("--status", choices=("firing", "acknowledged", "resolved"))
    for name in ("ack", "resolve"):
        sp = asub.add_parser(name, help=f"{name} an alert")
        client(sp)
        sp.add_argument("alert_id", type=trial_id)

    results = sub.add_parser("results", help="results: traffic and corpus, two lists never mixed")
    client(results)
    for name in ("team", "status", "model", "since", "until"):
        results.add_argument(f"--{name}")


def run(args: argparse.Namespace, base: str, auth: dict[str, str], call: Call, segment: Callable[[str], str]) -> int | None:
    data: dict[str, Any]
    if args.command == "trials" and args.action == "promote":
        body: dict[str, Any] = {"daily_cap_usd": args.daily_cap_usd}
        for name in ("sample_rate", "min_judged", "note"):
            if getattr(args, name) is not None:
                body[name] = getattr(args, name)
        if args.acknowledge_segment:
            body["acknowledge_segments"] = list(args.acknowledge_segment)
        headers = {"Idempotency-Key": args.idempotency_key} if args.idempotency_key else {}
        data = call("POST", f"{base}/v1/trials/{segment(args.trial_id)}/promote", json=body, headers=headers | auth)
        print(json.dumps(data, indent=2) if args.json else render_watch(data["watch"]))
        return 0
    if args.command == "watches":
        if args.action == "list":
            params = {"status": args.status} if args.status else {}
            data = call("GET", f"{base}/v1/watches", params=params, headers=auth)
            print(json.dumps(data, indent=2) if args.json else render_watches(data.get("watches", [])))
            return 0
        url = f"{base}/v1/watches/{segment(args.watch_id)}"
        data = call("GET", url, headers=auth) if args.action == "show" else call("POST", url + "/stop", headers=auth)
        print(json.dumps(data, indent=2) if args.json else render_watch(data))
        return 0
    if args.command == "alerts":
        if args.action == "list":
            params = {"status": args.status} if args.status else {}
            data = call("GET", f"{base}/v1/alerts", params=params, headers=auth)
            print(json.dumps(data, indent=2) if args.json else render_alerts(data.get("alerts", [])))
            return 0
        data = call("POST", f"{base}/v1/alerts/{segment(args.alert_id)}/{args.action}", headers=auth)
        print(json.dumps(data, indent=2) if args.json else render_alerts([data]))
        return 0
    if args.command == "results":
        params = {n: getattr(args, n) for n in ("team", "status", "model", "since", "until") if getattr(args, n)}
        data = call("GET", f"{base}/v1/results", params=params, headers=auth)
        print(json.dumps(data, indent=2) if args.json else render_results(data))
        return 0
    return None


def render_watch(w: dict[str, Any]) -> str:
    d, s = w["detector"], w["spend_today"]
    return "\n".join([
        f"watch {w['id']} ({w['team']}) — {w['status']}; promoted from trial {w['trial_id']}",
        f"sentinel: {w['old_model']} (replaced) vs {w['new_model']} (incumbent), sample rate {w['sample_rate']}",
        f"judged {w['judged']} ({count(w['old_wins'], 'old win')}, {count(w['new_wins'], 'new win')}, "
        f"{count(w['ties'], 'tie')}); "
        f"old-model win rate {pct(w['old_win_rate'])}",
        f"detector: statistic {d['statistic']:.3f} / threshold {d['threshold']:.3f} "
        f"(p0 {d['baseline']}, p1 {d['alternative']:.2f}, min {d['min_judged']} judged)"
        + (f" — FIRED at judged case {d['fired_at_judged']}" if d["fired"] else ""),
        f"spend today ({s['day']}): {usd(s['charged_micros'])} of {usd(s['cap_micros'])} cap, "
        f"{usd(s['reserved_micros'])} reserved",
    ])


def render_watches(items: list[dict[str, Any]]) -> str:
    if not items:
        return "no watches"
    rows = [(w["id"], w["team"], w["old_model"], w["new_model"], w["status"], str(w["judged"]), pct(w["old_win_rate"]),
             "FIRED" if w["detector"]["fired"] else "-", usd(w["spend_today"]["charged_micros"])) for w in items]
    return table(rows, ("watch", "team", "old", "new", "status", "judged", "old wins", "alert", "spend today"))


def render_alerts(items: list[dict[str, Any]]) -> str:
    if not items:
        return "no alerts"
    rows = [(a["id"], a["team"], a["status"], str(a["evidence"].get("judged")), pct(a["evidence"].get("old_win_rate")))
            for a in items]
    return table(rows, ("alert", "team", "status", "judged", "old wins"))


def render_results(d: dict[str, Any]) -> str:
    out = ["traffic evidence (trials, replay trials):"]
    traffic = d.get("traffic") or []
    out.append(table([(t["id"], t["team"], t["candidate_model"], t["status"], t["verdict"]["wording"])
                      for t in traffic], ("trial", "team", "candidate", "status", "verdict")) if traffic else "  none")
    corpus = d.get("corpus")
    out.append("corpus evidence (experiments, A/B comparisons):")
    if corpus is None:  # a sidecar holds none: it says where it is
        out.append("  " + str((d.get("corpus_source") or {}).get("message", "not held here")))
    else:
        out.append(table([(c["id"], c.get("team", ""), c.get("wording", "")) for c in corpus],
                         ("experiment", "team", "result")) if corpus else "  none")
    return "\n".join(out)


def render_live_head(d: dict[str, Any]) -> list[str]:
    """Firing alerts first, then the tiles and the watches (the rest is :func:`sidecar.cli.render.render_live`'s)."""
    out: list[str] = []
    for a in d.get("alerts") or []:
        ev = a.get("evidence") or {}
        out.append(f"ALERT {a['id']} ({a['team']}): watch {a['watch_id']} — the replaced model wins "
                   f"{pct(ev.get('old_win_rate'))} of decisive judgments after {ev.get('judged')} judged cases")
    tiles = d.get("tiles") or []
    if tiles:
        out.append("  ".join(f"{t['tile'].replace('_', ' ')}: {t['count']}" for t in tiles if "count" in t))
    spend = d.get("evaluation_spend") or {}
    for window in ("today", "last_7_days"):
        w = spend.get(window)
        if w:
            g = w["gateway_metered"]
            unknown = f" + {count(g['unknown_exchanges'], 'exchange')} of unknown cost" if g["unknown_exchanges"] else ""
            scope = f": {g['scope']}" if g.get("scope") else ""
            out.append(f"evaluation spend {window.replace('_', ' ')}: {usd(w['evaluation']['charged_micros'])} "
                       f"(list price); beside it, never summed, gateway-metered {usd(g['known_micros'])}{unknown}"
                       f"{scope}")
    watches = d.get("watches") or []
    if watches:
        out.append(render_watches(watches))
    return out


def render_live(d: dict[str, Any]) -> str:
    out = []
    alerts = d.get("alerts") or []
    out.append(f"alerts: {len(alerts)} firing" if alerts else "alerts: none firing")
    out.extend(render_live_head(d))  # firing alerts first, then the tiles and the watches
    running = d.get("running_trials") or []
    if running:
        rows = [
            (t["id"], t["team"], t["candidate_model"], t["verdict"]["wording"], str(t["verdict"]["cases"]),
             pct(t["verdict"]["win_rate"]), usd(t["spend"]["known_micros"]))
            for t in running
        ]
        out.append(table(rows, ("trial", "team", "candidate", "verdict", "cases", "win rate", "spend")))
    else:
        out.append("no running trials")
    s = d["evaluation_spend"]
    out.append(f"evaluation spend: {usd(s['known_micros'])} known, {usd(s['reserved_micros'])} reserved (never summed into gateway spend)")
    i = d["intake"]
    out.append(f"intake queue: {i['depth']}/{i['capacity']}, {count(i['in_flight'], 'case')} in flight")
    return "\n".join(out)
