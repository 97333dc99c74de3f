"""Gates that rollout controllers call (issue 26, item 1), driven by stand-in controllers.

:class:`ArgoWebMetric` makes exactly the HTTP call Argo Rollouts' ``web`` metric provider makes
(one GET with the template's headers; a non-2xx answer is an *Error* measurement), evaluates the
template's ``jsonPath`` over the JSON body (the first result, typed, as the provider's
``getValue`` does) and its ``successCondition`` / ``failureCondition`` the way Argo's
``evaluate.EvaluateResult`` does (both set: success if the success condition holds, failed if the
failure condition holds, otherwise *Inconclusive*). The template it reads is the one in
docs/promotion.md, so the documented manifest is what is exercised.

:class:`Flagger` POSTs Flagger's documented webhook payload
(``{"name", "namespace", "phase", "metadata"}``) and reads only the status code, as Flagger does.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import httpx
import yaml

from sidecar.demo.fake_provider import FakeModel
from tests.harness import CANDIDATE, INCUMBENT, JUDGE, Harness, exchange, wait_for

DOC = Path(__file__).resolve().parents[3] / "docs" / "promotion.md"
N = 120


def manifests() -> list[dict[str, Any]]:
    """Every YAML document of docs/promotion.md's ```yaml blocks."""
    blocks = re.findall(r"```yaml\n(.*?)```", DOC.read_text(), flags=re.S)
    return [d for b in blocks for d in yaml.safe_load_all(b) if d]


def kind(k: str) -> dict[str, Any]:
    found = [d for d in manifests() if d.get("kind") == k]
    assert len(found) == 1, f"docs/promotion.md has {len(found)} {k}"
    return found[0]


def models() -> dict[str, FakeModel]:
    return {
        INCUMBENT: FakeModel(quality=0.5),
        CANDIDATE: FakeModel(quality=0.5, quality_noise=0.0),
        JUDGE: FakeModel(judge=True),
    }


def planted(i: int, q: str, prefix: str = "ex") -> dict[str, Any]:
    """q=0.000: the candidate wins; 1.000: the incumbent wins."""
    return exchange(i, exchange_id=f"{prefix}-{i}", content=f"incumbent answer {i} ⟨q={q}⟩")


# -- a stand-in Argo Rollouts web metric -------------------------------------------------------


def json_path(expr: str, data: Any) -> Any:
    """The subset of Kubernetes JSONPath a gate template uses: ``{$}`` and ``{$.a.b}``."""
    m = re.fullmatch(r"\{\$((?:\.[A-Za-z_][A-Za-z0-9_]*)*)\}", expr)
    assert m, f"unsupported jsonPath {expr!r}"
    for part in filter(None, m.group(1).split(".")):
        data = data[part]
    return data


def condition(expr: str, result: Any) -> bool:
    """Argo's conditions as the template writes them: ``result.a.b == <true|false|"s"|number>``."""
    m = re.fullmatch(r"\s*result((?:\.[A-Za-z_][A-Za-z0-9_]*)*)\s*==\s*(.+?)\s*", expr)
    assert m, f"unsupported condition {expr!r}"
    value = result
    for part in filter(None, m.group(1).split(".")):
        value = value[part]
    literal = yaml.safe_load(m.group(2))
    return bool(value == literal and type(value) is type(literal))


class ArgoWebMetric:
    def __init__(self, template: dict[str, Any], args: dict[str, str]) -> None:
        metric = template["spec"]["metrics"][0]
        self.success = metric["successCondition"]
        self.failure = metric["failureCondition"]
        web = metric["provider"]["web"]
        self.json_path = web["jsonPath"]
        sub = lambda s: re.sub(r"\{\{\s*args\.([\w-]+)\s*\}\}", lambda m: args[m.group(1)], s)  # noqa: E731
        self.url = re.sub(r"^https?://[^/]+", "", sub(web["url"]))  # the path, on the test's sidecar
        self.headers = {h["key"]: sub(h["value"]) for h in web.get("headers", [])}
        self.calls: list[tuple[str, str]] = []

    async def measure(self, client: httpx.AsyncClient) -> str:
        self.calls.append(("GET", self.url))
        r = await client.get(self.url, headers=self.headers)
        if not 200 <= r.status_code < 300:
            return "Error"
        result = json_path(self.json_path, r.json())
        ok, bad = condition(self.success, result), condition(self.failure, result)
        if bad:
            return "Failed"
        return "Successful" if ok else "Inconclusive"


# -- a stand-in Flagger --------------------------------------------------------------------------


class Flagger:
    def __init__(self, canary: dict[str, Any], base: str) -> None:
        self.name = canary["metadata"]["name"]
        self.namespace = canary["metadata"].get("namespace", "default")
        self.hooks = {w["type"]: w for w in canary["spec"]["analysis"]["webhooks"]}
        self.base = base

    async def call(self, client: httpx.AsyncClient, hook: str, metadata: dict[str, str] | None = None) -> int:
        w = self.hooks[hook]
        url = re.sub(r"^https?://[^/]+", self.base, w["url"])
        payload = {"name": self.name, "namespace": self.namespace, "phase": "Promoting" if hook == "confirm-promotion"
                   else "Progressing", "metadata": {**w.get("metadata", {}), **(metadata or {})}}
        r = await client.post(url, json=payload)
        assert r.headers["content-type"].startswith("application/json")
        if r.status_code >= 300:
            assert set(r.json()["error"]) >= {"code", "message", "field"}
        return r.status_code


# -- the tests --------------------------------------------------------------------------------------


async def test_argo_web_metric_collecting_adoptable_rejected(tmp_path: Path) -> None:
    async with Harness(tmp_path, models=models(), workers=1, auth=True) as h:
        token = h.token(subject="argo", roles=("viewer",), teams=("team-a",))
        adopt = (await h.create_trial(audit_share=0.0, on_decision="stop"))["id"]
        template = kind("AnalysisTemplate")
        argo = ArgoWebMetric(template, {"trial-id": adopt, "shadowtrial-token": token})
        async with httpx.AsyncClient(base_url=h.sidecar.admin_url if h.sidecar else "") as client:
            assert await argo.measure(client) == "Inconclusive"  # Collecting
            await h.send([planted(i, "0.000") for i in range(N)])
            await h.settle(adopt, N)
            assert await argo.measure(client) == "Successful"  # Adoptable
            gate = (await client.get(argo.url, headers=argo.headers)).json()
            assert (gate["adoptable"], gate["rejected"], gate["decided"], gate["phase"]) == (True, False, True, "adoptable")
            assert isinstance(gate["judged"], int) and gate["judged"] >= 20
            assert 0.45 < gate["decision_bounds"]["lower"] <= gate["decision_bounds"]["upper"] <= 1.0

            reject = (await h.create_trial(audit_share=0.0, on_decision="stop"))["id"]
            argo_r = ArgoWebMetric(template, {"trial-id": reject, "shadowtrial-token": token})
            assert await argo_r.measure(client) == "Inconclusive"
            await h.send([planted(i, "1.000", "lose") for i in range(N)])
            await h.settle(reject, N)
            assert await argo_r.measure(client) == "Failed"  # Rejected
            # Exactly the provider's call: one GET per measurement, nothing else.
            assert argo.calls == [("GET", f"/v1/trials/{adopt}/gate")] * 2

            # Auth like any client: no token is an Error measurement (401), another team's trial 404.
            argo_none = ArgoWebMetric(template, {"trial-id": adopt, "shadowtrial-token": "x"})
            assert await argo_none.measure(client) == "Error"
            other = h.token(subject="argo", roles=("viewer",), teams=("team-b",))
            r = await client.get(f"/v1/trials/{adopt}/gate", headers={"Authorization": f"Bearer {other}"})
            assert r.status_code == 404 and r.json()["error"]["code"] == "not_found"


async def test_flagger_confirm_promotion_held_then_promoted_once_and_rollback_after_drift(tmp_path: Path) -> None:
    async with Harness(tmp_path, models=models(), workers=1, auth=True, never_called=()) as h:
        assert h.sidecar is not None and h.admin is not None
        trial = (await h.create_trial(audit_share=0.0, on_decision="stop"))["id"]
        canary = kind("Canary")
        flagger = Flagger(canary, h.sidecar.admin_url)
        promoter = h.token(subject="flagger", roles=("developer",), teams=("team-a",))
        reader = h.token(subject="flagger-ro", roles=("viewer",), teams=("team-a",))
        meta = {"trial": trial, "token": promoter, "sample_rate": "1"}  # every served exchange: a quick alert
        # The harness's bound on one admin call (httpx's 5 s default is short of a promotion in a busy worker).
        async with httpx.AsyncClient(timeout=30.0) as client:
            # No token: 401 in the error shape; a reader may not promote.
            assert await flagger.call(client, "confirm-promotion", {"trial": trial, "token": ""}) == 401
            assert await flagger.call(client, "confirm-promotion", {"trial": trial, "token": reader}) == 403
            # Held while Collecting.
            assert await flagger.call(client, "confirm-promotion", meta) == 409
            assert await flagger.call(client, "rollback", meta) == 409  # nothing promoted: nothing to roll back
            await h.send([planted(i, "0.000") for i in range(N)])
            await h.settle(trial, N)
            # Adoptable: promoted, its watch created; the retries Flagger keeps making promote nothing more.
            assert await flagger.call(client, "confirm-promotion", meta) == 200
            assert await flagger.call(client, "confirm-promotion", meta) == 200
            assert await flagger.call(client, "confirm-promotion", meta) == 200
            watches = (await h.admin.get("/v1/watches")).json()["watches"]
            assert [w["trial_id"] for w in watches] == [trial]
            assert (await h.trial(trial))["status"] == "adopted"
            wid = watches[0]["id"]

            # Rollback: 409 while the watch is quiet, 200 once a drift alert is firing.
            assert await flagger.call(client, "rollback", meta) == 409
            await h.send([exchange(i, model=CANDIDATE, exchange_id=f"drift-{i}",
                                   content=f"new incumbent answer {i} ⟨q=0.000⟩") for i in range(200)])

            async def fired() -> bool:
                assert h.admin is not None
                return bool((await h.admin.get(f"/v1/watches/{wid}")).json()["detector"]["fired"])

            await wait_for(fired, timeout=120, what="the drift alert", wake=h.runtime.progress)
            assert await flagger.call(client, "rollback", meta) == 200
            gate = (await h.admin.get(f"/v1/watches/{wid}/gate")).json()
            assert (gate["drifting"], gate["healthy"], gate["alert_status"]) == (True, False, "firing")


async def test_flagger_pre_rollout_and_rollout_advance_until_the_trial_is_rejected(tmp_path: Path) -> None:
    """Flagger's ``pre-rollout`` (before traffic moves) and ``rollout`` (each analysis iteration)
    hooks: a 2xx lets the canary advance, anything else pauses it and, past the analysis
    ``threshold``, rolls it back. So: 200 while the named trial is not Rejected, 409 once it is."""
    async with Harness(tmp_path, models=models(), workers=1, auth=True) as h:
        assert h.sidecar is not None
        trial = (await h.create_trial(audit_share=0.0, on_decision="stop"))["id"]
        flagger = Flagger(kind("Canary"), h.sidecar.admin_url)
        reader = h.token(subject="flagger-ro", roles=("viewer",), teams=("team-a",))
        other = h.token(subject="flagger-ro", roles=("viewer",), teams=("team-b",))
        meta = {"trial": trial, "token": reader}
        async with httpx.AsyncClient(timeout=30.0) as client:
            for hook in ("pre-rollout", "rollout"):
                assert await flagger.call(client, hook, {"trial": trial, "token": ""}) == 401
                assert await flagger.call(client, hook, {"trial": trial, "token": other}) == 404
                assert await flagger.call(client, hook, {"trial": "tr_nope", "token": reader}) == 404
                assert await flagger.call(client, hook, meta) == 200  # Collecting: advance
            await h.send([planted(i, "1.000", "lose") for i in range(N)])
            await h.settle(trial, N)
            assert (await h.trial(trial))["verdict"]["wording"] == "Rejected"
            assert await flagger.call(client, "pre-rollout", meta) == 409
            assert await flagger.call(client, "rollout", meta) == 409
            r = await client.post(f"{h.sidecar.admin_url}/v1/gates/flagger/rollout",
                                  json={"name": "llm-gateway", "namespace": "gateway", "phase": "Progressing",
                                        "metadata": meta})
            assert r.json()["error"]["code"] == "trial_rejected"


# -- the documented manifests' field names -------------------------------------------------------

#: Field names, per path, from Argo Rollouts' documentation (AnalysisTemplate, the web metric
#: provider, Rollout's canary strategy) and Flagger's (Canary, analysis, webhooks). No package
#: publishes their CRD schemas, so these lists stand in for them.
ARGO_TEMPLATE = {
    "": {"apiVersion", "kind", "metadata", "spec"},
    "spec": {"args", "metrics", "dryRun", "measurementRetention"},
    "spec.args[]": {"name", "value", "valueFrom"},
    "spec.args[].valueFrom": {"secretKeyRef", "fieldRef"},
    "spec.args[].valueFrom.secretKeyRef": {"name", "key"},
    "spec.metrics[]": {"name", "interval", "initialDelay", "count", "successCondition", "failureCondition",
                       "failureLimit", "inconclusiveLimit", "consecutiveErrorLimit", "provider"},
    "spec.metrics[].provider": {"web", "prometheus", "job", "datadog", "newRelic", "wavefront", "kayenta",
                                "cloudWatch", "graphite", "influxdb", "skywalking", "plugin"},
    "spec.metrics[].provider.web": {"url", "method", "headers", "body", "jsonBody", "timeoutSeconds", "jsonPath",
                                    "insecure", "authentication"},
    "spec.metrics[].provider.web.headers[]": {"key", "value"},
}
ARGO_ROLLOUT = {
    "": {"apiVersion", "kind", "metadata", "spec"},
    "spec": {"replicas", "selector", "template", "workloadRef", "strategy", "revisionHistoryLimit",
             "minReadySeconds", "progressDeadlineSeconds", "paused", "analysis"},
    "spec.strategy": {"canary", "blueGreen"},
    "spec.strategy.canary": {"steps", "analysis", "canaryService", "stableService", "trafficRouting", "maxSurge",
                             "maxUnavailable"},
    "spec.strategy.canary.steps[]": {"setWeight", "pause", "analysis", "experiment", "setCanaryScale",
                                     "setHeaderRoute", "setMirrorRoute", "plugin"},
    "spec.strategy.canary.steps[].analysis": {"templates", "args", "dryRun", "measurementRetention"},
    "spec.strategy.canary.steps[].analysis.templates[]": {"templateName", "clusterScope"},
    "spec.strategy.canary.steps[].analysis.args[]": {"name", "value", "valueFrom"},
    "spec.strategy.canary.steps[].pause": {"duration"},
}
FLAGGER_CANARY = {
    "": {"apiVersion", "kind", "metadata", "spec"},
    "spec": {"provider", "targetRef", "autoscalerRef", "ingressRef", "service", "analysis", "skipAnalysis",
             "progressDeadlineSeconds", "revertOnDeletion", "suspend"},
    "spec.targetRef": {"apiVersion", "kind", "name"},
    "spec.service": {"name", "port", "portName", "targetPort", "portDiscovery", "gateways", "hosts", "match",
                     "retries", "timeout", "headers", "corsPolicy", "trafficPolicy", "appProtocol"},
    "spec.analysis": {"interval", "threshold", "maxWeight", "stepWeight", "stepWeights", "iterations", "match",
                      "metrics", "webhooks", "alerts", "mirror", "mirrorWeight", "primaryReadyThreshold",
                      "canaryReadyThreshold", "stepWeightPromotion", "sessionAffinity"},
    "spec.analysis.webhooks[]": {"name", "type", "url", "timeout", "metadata", "muteAlert", "retries"},
}
FLAGGER_HOOK_TYPES = {"confirm-rollout", "pre-rollout", "rollout", "confirm-traffic-increase", "confirm-promotion",
                      "post-rollout", "rollback", "event"}


def _fields(doc: Any, path: str, allowed: dict[str, set[str]], free: tuple[str, ...]) -> list[str]:
    """Field names of ``doc`` not in ``allowed`` (paths under ``free`` are free-form: labels, pod specs)."""
    if any(path == f or path.startswith(f + ".") for f in free):
        return []
    bad: list[str] = []
    if isinstance(doc, dict):
        if path in allowed:
            bad += [f"{path}.{k}" for k in doc if k not in allowed[path]]
        for k, v in doc.items():
            bad += _fields(v, f"{path}.{k}".lstrip("."), allowed, free)
    elif isinstance(doc, list):
        for item in doc:
            bad += _fields(item, f"{path}[]", allowed, free)
    return bad


def test_the_documented_manifests_use_only_documented_fields() -> None:
    template, rollout, canary = kind("AnalysisTemplate"), kind("Rollout"), kind("Canary")
    assert template["apiVersion"] == rollout["apiVersion"] == "argoproj.io/v1alpha1"
    assert canary["apiVersion"] == "flagger.app/v1beta1"
    assert _fields(template, "", ARGO_TEMPLATE, ("metadata",)) == []
    assert _fields(rollout, "", ARGO_ROLLOUT, ("metadata", "spec.selector", "spec.template")) == []
    assert _fields(canary, "", FLAGGER_CANARY, ("metadata", "spec.analysis.webhooks[].metadata")) == []
    hooks = canary["spec"]["analysis"]["webhooks"]
    assert {h["type"] for h in hooks} == {"pre-rollout", "rollout", "confirm-promotion", "rollback"} <= FLAGGER_HOOK_TYPES
    # Flagger's webhook metadata is a map of strings.
    assert all(isinstance(v, str) for h in hooks for v in h["metadata"].values())
    # The Rollout's analysis step names the documented template.
    step = rollout["spec"]["strategy"]["canary"]["steps"][0]["analysis"]
    assert step["templates"][0]["templateName"] == template["metadata"]["name"]
    assert {a["name"] for a in step["args"]} <= {a["name"] for a in template["spec"]["args"]}
