"""The control plane's read of everything its gateways report, for the one console and
``GET /v1/results`` on the collector.

**Traffic** comes from the uplink records the collector keeps
(:class:`~sidecar.collector.store.reports.ReportsStore`): per trial, the latest
``trial_state`` of every sidecar that reported it (the highest revision across them is the
trial's row), each sidecar's count of ``case_result`` records, and the ``alert`` records
(watches are known here only by their alerts). A trial the collector runs itself adds its own
figures (``control_plane``). Traffic verdicts are worded by the traffic table
(:func:`policies.wording.traffic_wording`).

**Corpus** comes from the collector's own corpus services: comparison groups (experiments)
and A/B comparisons, each worded by the corpus table (:func:`policies.wording.corpus_wording`:
*Candidate ahead*, *Parity*, *Candidate behind*, *Inconclusive*).

The two lists are never interleaved and never share a row shape; every row says its
``evidence``. Each principal sees the teams its role model allows (:mod:`policies.roles`).
"""

from __future__ import annotations

import datetime as dt
import logging
from collections import defaultdict
from typing import Any, Callable, Sequence

import msgspec

from policies.roles import Principal
from policies.wording import corpus_wording, traffic_wording
from sidecar.collector.collected import CollectedRecords
from sidecar.collector.corpus.api import Services
from sidecar.collector.store.base import ControlPlaneStore
from sidecar.collector.store.reports import SidecarReport
from sidecar.errors import BadRequest
from uplink.schema import AlertRecord, TrialState

log = logging.getLogger("shadowtrial.collector")

DAY_S = 86_400.0
#: ``GET /v1/results`` filters, as on the sidecar.
RESULT_FILTERS = ("team", "status", "model", "since", "until")
NOTE = "traffic and corpus evidence are never mixed; only traffic evidence may promote"
#: The only words a corpus result is shown in.
CORPUS_WORDS = ("Candidate ahead", "Parity", "Candidate behind", "Inconclusive")

_state = msgspec.json.Decoder(TrialState)
_alert = msgspec.json.Decoder(AlertRecord)


def day(value: str | None, name: str) -> float | None:
    """A ``YYYY-MM-DD`` filter as the UTC midnight it starts; 400 naming ``name`` otherwise."""
    if not value:
        return None
    try:
        return dt.datetime.strptime(value, "%Y-%m-%d").replace(tzinfo=dt.timezone.utc).timestamp()
    except ValueError:
        raise BadRequest(f"{name} must be a UTC date YYYY-MM-DD, got {value!r}", field=name) from None


def traffic_words(code: str, status: str) -> str:
    try:
        return traffic_wording(code, ended=status != "running", promoted=status == "adopted")  # type: ignore[arg-type]
    except ValueError:
        return code


def corpus_words(code: str | None) -> str:
    """A corpus code in the corpus table's words; no code yet (running) reads *Inconclusive*."""
    if code is None:
        return "Inconclusive"
    try:
        words = corpus_wording(code)  # type: ignore[arg-type]
    except ValueError:
        return "Inconclusive"
    return words if words in CORPUS_WORDS else "Inconclusive"


def _decode_state(body: bytes | None) -> TrialState | None:
    if body is None:
        return None
    try:
        return _state.decode(body)
    except (msgspec.ValidationError, msgspec.DecodeError):
        return None


def trial_row(trial_id: str, reports: Sequence[SidecarReport], control_plane: dict[str, Any] | None) -> dict[str, Any]:
    """One traffic row: the trial's latest state across its sidecars, and each sidecar's part."""
    states = [(r, s) for r in reports if (s := _decode_state(r.state)) is not None]
    latest = max(states, key=lambda rs: (rs[1].revision, rs[1].at))[1] if states else None
    sidecars = [{"sidecar_id": r.sidecar_id, "case_results": r.case_results,
                 "revision": None if s is None else s.revision, "status": None if s is None else s.status,
                 "last_received_at": r.last_received_at}
                for r in reports for s in [_decode_state(r.state)]]
    team = latest.team if latest is not None else next((r.team for r in reports if r.team), None)
    row: dict[str, Any] = {"evidence": "traffic", "id": trial_id, "team": team,
                           "case_results": sum(r.case_results for r in reports), "sidecars": sidecars,
                           "control_plane": control_plane}
    if latest is None:
        row.update(status=None, incumbent_model=None, candidate_model=None, execution_site=None, updated_at=None,
                   gateway=None, route=None, cases=0, verdict=None, spend=None, funnel={})
        return row
    row.update(status=latest.status, incumbent_model=latest.incumbent_model, candidate_model=latest.candidate_model,
               execution_site=latest.execution_site, updated_at=latest.at, gateway=latest.gateway,
               route=latest.route, cases=latest.cases, judge_version_id=latest.judge_version_id,
               funnel=dict(latest.funnel),
               verdict={"code": latest.verdict, "wording": traffic_words(latest.verdict, latest.status),
                        "decision": latest.decision, "cases": latest.cases,
                        "interval": None if latest.interval is None else [latest.interval.low, latest.interval.high]},
               spend={"cap_micros": latest.cap_micros, "spent_micros": latest.spent_micros,
                      "known_micros": latest.known_micros, "unknown_calls": latest.unknown_calls,
                      "basis": "list_price"},
               segments=None if not latest.segments else {
                   "rejected": list(latest.segments_rejected),
                   "values": [{"key": x.key, "judged": x.judged, "code": x.decision,
                               "verdict": traffic_words(x.decision, "running"), "win_rate": x.win_rate,
                               "lower": x.interval.low, "upper": x.interval.high} for x in latest.segments],
               })
    return row


class OperatorViews:
    """The control plane's traffic and corpus reads (module docs)."""

    def __init__(self, store: ControlPlaneStore, records: CollectedRecords, services: Services,
                 clock: Callable[[], float]) -> None:
        self.store = store
        self.records = records
        self.services = services
        self.clock = clock

    # -- traffic ---------------------------------------------------------------------

    async def traffic(self, principal: Principal) -> list[dict[str, Any]]:
        """Every trial a sidecar reported and the principal sees, most recently updated first."""
        by_trial: dict[str, list[SidecarReport]] = defaultdict(list)
        for r in await self.store.sidecar_reports():
            by_trial[r.trial_id].append(r)
        here = {str(t["trial_id"]): t.get("control_plane") for t in await self.records.trials()}
        rows = [trial_row(tid, reports, here.get(tid)) for tid, reports in by_trial.items()]
        rows = [r for r in rows if r["team"] is not None and principal.sees(r["team"])]
        rows.sort(key=lambda r: (-(r["updated_at"] or 0.0), r["id"]))
        return rows

    async def alerts(self, principal: Principal) -> list[dict[str, Any]]:
        """Each alert's latest state (the last record of it), newest first."""
        latest: dict[str, dict[str, Any]] = {}
        for sidecar_id, body in await self.store.alert_records():
            try:
                a = _alert.decode(body)
            except (msgspec.ValidationError, msgspec.DecodeError):
                continue
            if not principal.sees(a.team):
                continue
            seen = latest.get(a.alert_id)
            if seen is None or a.at >= seen["at"]:
                latest[a.alert_id] = {"id": a.alert_id, "watch_id": a.watch_id, "team": a.team, "state": a.state,
                                      "at": a.at, "statistic": a.statistic, "threshold": a.threshold,
                                      "sidecar_id": sidecar_id}
        return sorted(latest.values(), key=lambda a: -a["at"])

    async def watches(self, principal: Principal) -> list[dict[str, Any]]:
        """The watches known from their alerts: per watch, its alerts' latest states."""
        by_watch: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for a in await self.alerts(principal):
            by_watch[a["watch_id"]].append(a)
        out = []
        for watch_id, alerts in by_watch.items():
            out.append({"id": watch_id, "team": alerts[0]["team"], "alerts": len(alerts),
                        "firing": sum(1 for a in alerts if a["state"] == "firing"),
                        "latest_state": alerts[0]["state"], "latest_at": alerts[0]["at"],
                        "sidecars": sorted({a["sidecar_id"] for a in alerts})})
        out.sort(key=lambda w: -w["latest_at"])
        return out

    async def live(self, principal: Principal) -> dict[str, Any]:
        """Firing alerts first, then the tiles: running trials, watches with a firing alert,
        firing alerts, evaluation spend reported (traffic) beside the experiments' (corpus)."""
        traffic = await self.traffic(principal)
        alerts = await self.alerts(principal)
        firing = [a for a in alerts if a["state"] == "firing"]
        running = [t for t in traffic if t["status"] == "running"]
        watches = await self.watches(principal)
        corpus = await self.corpus(principal)
        return {
            "alerts": firing,
            "tiles": [
                {"tile": "running_trials", "count": len(running)},
                {"tile": "watches_reporting", "count": len(watches)},
                {"tile": "firing_alerts", "count": len(firing)},
                {"tile": "evaluation_spend",
                 "traffic_spent_micros": sum((t["spend"] or {}).get("spent_micros", 0) for t in traffic),
                 "corpus_known_micros": sum(c["spend_known_micros"] or 0 for c in corpus)},
            ],
            "running_trials": running,
            "experiments_running": [c for c in corpus if c["status"] in ("admitted", "running")],
            "gateways": sorted({s["sidecar_id"] for t in traffic for s in t["sidecars"]}),
        }

    # -- corpus ----------------------------------------------------------------------

    async def corpus(self, principal: Principal, team: str | None = None) -> list[dict[str, Any]]:
        """Comparison groups and A/B comparisons, newest first, in the corpus table's words."""
        svc = self.services
        suites = {s["id"]: s for s in await svc.suites.listing(principal, team)}
        out: list[dict[str, Any]] = []
        for listed in await svc.comparisons.listing(principal, team, None):
            if listed["kind"] == "ab":
                ab = await svc.ab.get(principal, listed["id"])
                out.append(_ab_row(ab, suites))
                continue
            group = await svc.comparisons.get(principal, listed["id"])
            out.append(_group_row(group, suites))
        out.sort(key=lambda r: -r["created_at"])
        return out

    # -- results ---------------------------------------------------------------------

    async def results(self, principal: Principal, query: dict[str, str]) -> dict[str, Any]:
        """``GET /v1/results``: ``traffic`` and ``corpus``, two lists never interleaved. The
        date filters read a trial's latest reported state time (the uplink carries no creation
        time) and an experiment's creation time; ``model`` matches any arm or side."""
        team, status, model = query.get("team") or None, query.get("status") or None, query.get("model") or None
        since, until = day(query.get("since"), "since"), day(query.get("until"), "until")

        def keep(row_team: str | None, row_status: str | None, models: Sequence[str | None], at: float | None) -> bool:
            if team is not None and row_team != team:
                return False
            if status is not None and row_status != status:
                return False
            if model is not None and not any(model.lower() in (m or "").lower() for m in models):
                return False
            if since is not None and (at is None or at < since):
                return False
            return not (until is not None and (at is None or at >= until + DAY_S))

        traffic = [t for t in await self.traffic(principal)
                   if keep(t["team"], t["status"], (t["incumbent_model"], t["candidate_model"]), t["updated_at"])]
        corpus = [c for c in await self.corpus(principal, team)
                  if keep(c["team"], c["status"], c["models"], c["created_at"])]
        return {"traffic": traffic, "corpus": corpus, "note": NOTE}


def _group_row(g: dict[str, Any], suites: dict[str, dict[str, Any]]) -> dict[str, Any]:
    arms = g["arms"]
    run = g.get("run") or {}
    primary = run.get("primary") or []
    results = [{"arm": p["arm"], "metric": p["metric"], "code": p["code"], "wording": corpus_words(p["code"])}
               for p in primary]
    suite = suites.get(g["suite_id"], {})
    spend = run.get("spend") or {}
    return {"evidence": "corpus", "kind": "experiment", "id": g["id"], "team": g["team"], "status": g["status"],
            "suite_id": g["suite_id"], "suite": suite.get("name", g["suite_id"]),
            "dataset_id": (suite.get("dataset") or {}).get("id"), "baseline_model": arms[0]["model"] if arms else None,
            "candidate_models": [a["model"] for a in arms[1:]], "models": [a["model"] for a in arms],
            "primary_metric": g["primary_metric"], "results": results,
            "wording": "; ".join(f"{r['arm']}: {r['wording']}" for r in results) or "Inconclusive",
            "progress": run.get("progress"), "spend_known_micros": spend.get("known_micros"),
            "created_at": g["created_at"]}


def _ab_row(c: dict[str, Any], suites: dict[str, dict[str, Any]]) -> dict[str, Any]:
    suite = suites.get(c["suite_id"], {})
    models = [str(c["baseline"].get("ref")), str(c["candidate"].get("ref"))]
    words = corpus_words(c.get("verdict"))
    return {"evidence": "corpus", "kind": "ab_comparison", "id": c["id"], "team": c["team"], "status": c["status"],
            "suite_id": c["suite_id"], "suite": suite.get("name", c["suite_id"]),
            "dataset_id": (suite.get("dataset") or {}).get("id"),
            "baseline_model": models[0], "candidate_models": [models[1]], "models": models,
            "primary_metric": None, "results": [{"arm": "candidate", "metric": None, "code": c.get("verdict"),
                                                 "wording": words}],
            "wording": words, "progress": None, "spend_known_micros": None, "created_at": c["created_at"]}


__all__ = ["CORPUS_WORDS", "OperatorViews", "corpus_words", "day", "trial_row"]
