"""Plain-text rendering of admin API answers for the terminal."""

from __future__ import annotations

import datetime as _dt
from typing import Any, Sequence


def usd(micros: int | None) -> str:
    return "—" if micros is None else f"${micros / 1_000_000:,.4f}"


def count(n: int, noun: str, plural: str | None = None) -> str:
    """``1 tie``, ``3 ties``, ``0 judged cases``."""
    return f"{n} {noun if n == 1 else plural or noun + 's'}"


def utc(seconds: float | None) -> str:
    """Epoch seconds as a UTC time a person reads: ``2026-12-02 06:19:35 UTC`` (``—`` when unknown)."""
    if seconds is None:
        return "—"
    return _dt.datetime.fromtimestamp(seconds, tz=_dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


def pct(x: float | None) -> str:
    return "—" if x is None else f"{100 * x:.1f}%"


def interval(iv: dict[str, float] | None) -> str:
    return "— (small sample)" if iv is None else f"[{pct(iv['lower'])}, {pct(iv['upper'])}]"


def table(rows: Sequence[Sequence[str]], header: Sequence[str]) -> str:
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    line = "  ".join(h.ljust(w) for h, w in zip(header, widths))
    sep = "  ".join("-" * w for w in widths)
    body = ["  ".join(str(c).ljust(w) for c, w in zip(r, widths)) for r in rows]
    return "\n".join([line, sep, *body])


def spend_line(spend: dict[str, Any]) -> str:
    cov = spend["coverage"]
    known = usd(spend["known_micros"])
    extra = "" if cov == "complete" else (f" ({cov}: {count(spend['unknown_calls'], 'call')} unpriced, "
                                          f"{usd(spend['held_for_unknown_micros'])} held)")
    return f"{known} of {usd(spend['cap_micros'])} cap{extra}; {usd(spend['reserved_micros'])} reserved"


def render_trial(t: dict[str, Any]) -> str:
    v = t["verdict"]
    f = t["funnel"]
    p = t.get("paired") or {}
    h = t.get("judge_health") or {}
    lines = [
        f"trial {t['id']}  [{t['status']}]  team {t['team']}",
        f"  {t['candidate_model']} (candidate) vs {t['incumbent_model']} (incumbent), sample rate {t['sample_rate']}",
        f"  verdict      {v['wording']} ({v['code']}), {count(v['cases'], 'judged case')}",
        f"  win rate     {pct(v['win_rate'])}  interval {interval(v['interval'])}  decision bounds {interval(v['decision_bounds'])}",
        f"  spend        {spend_line(t['spend'])}",
        f"  cost ratio   {_ratio(p.get('cost_ratio'))} of the incumbent's over {count(p.get('cost_cases', 0), 'paired case')}",
        f"  latency p50  {_ratio(p.get('latency_ratio'))} of the incumbent's",
        f"  judge        {t['judge']['name']} ({t['judge']['version_id'][:12]})",
    ]
    if h:
        lines.append(
            "  judge health first-slot win rate {}, tie rate {}, error rate {}, position consistency {}{}".format(
                pct(h.get("first_slot_win_rate")), pct(h.get("tie_rate")), pct(h.get("error_rate")),
                pct(h.get("position_consistency")), "  FLAGGED" if h.get("flagged") else "",
            )
        )
    outcomes = ", ".join(f"{k} {n}" for k, n in f["outcomes"].items() if n)
    lines.append(f"  funnel       {f['total']} matched: {outcomes or 'nothing yet'}; {f.get('in_flight', 0)} in flight")
    if t.get("segments"):
        lines.append(render_segments(t["segments"]))
    return "\n".join(lines)


def render_segments(s: dict[str, Any]) -> str:
    """A trial's per-segment verdicts (issue 27): its words, then one row per segment value."""
    head = (f"  segments     {s['summary']}  (by {', '.join(s['by'])}; each read at alpha "
            f"{s['per_segment_alpha']:.4g}, {s['control']})")
    if not s["values"]:
        return head + "\n               no judged case yet"
    rows = [
        (v["key"], v["verdict"] + (" <-" if v["key"] in s["rejected"] else ""), str(v["judged"]), pct(v["win_rate"]),
         f"[{pct(v['lower'])}, {pct(v['upper'])}]", _ratio(v["cost_ratio"]), _ratio(v["latency_ratio"]))
        for v in s["values"]
    ]
    body = table(rows, ("segment", "verdict", "judged", "win rate", "decision bounds", "cost", "latency p50"))
    return head + "\n" + "\n".join("    " + line for line in body.splitlines())


def _ratio(x: float | None) -> str:
    return "—" if x is None else f"{100 * x:.0f}%"


def render_trial_list(items: list[dict[str, Any]]) -> str:
    if not items:
        return "no trials"
    rows = [
        (t["id"], t["team"], t["status"] + (" (replay)" if t.get("source", {}).get("kind") == "replay" else ""),
         t["candidate_model"], t["incumbent_model"], t["verdict"]["wording"],
         str(t["verdict"]["cases"]), usd(t["spend"]["known_micros"]))
        for t in items
    ]
    return table(rows, ("id", "team", "status", "candidate", "incumbent", "verdict", "cases", "spend"))
