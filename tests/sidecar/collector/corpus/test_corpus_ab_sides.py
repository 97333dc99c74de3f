"""The sides of an A/B comparison (issue 24, items 1-3), over HTTP against a real collector
whose provider is the fake: a side's ``version`` runs the upstream model its alias pins (or is
refused naming the field); ``outputs`` take the screen's default empty lists and answer lists
in item order; ``agent`` and ``prompt`` sides are called."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sidecar.demo.fake_provider import FakeProvider
from tests.harness import CANDIDATE, INCUMBENT, JUDGE, wait_for
from tests.sidecar.collector.corpus.runs_kit import (
    Api,
    collector_toml,
    group_body,
    open_collector,
    planted_models,
    start_group,
)

PATH = "/v1/evaluations/comparisons"
EXACT = [{"name": "exact", "kind": "grader", "grader": {"type": "exact_match"}}]


async def finished(api: Api, cid: str) -> dict[str, Any]:
    seen: dict[str, Any] = {}

    async def done() -> bool:
        seen.update((await api.call("GET", f"{PATH}/{cid}")).json())
        return seen["verdict"] is not None

    await wait_for(done, what="the A/B comparison's verdict")
    return seen


def error(r: Any) -> tuple[int, str, str | None]:
    e = r.json()["error"]
    return r.status_code, e["code"], e["field"]


VERSIONED = f'''
[models."base-m"]
provider = "local"
input_price_per_mtok = 1.0
output_price_per_mtok = 2.0
[models."base-m".versions]
"2025-01" = "{INCUMBENT}"
"2026-01" = "{CANDIDATE}"
'''


async def test_a_side_version_runs_the_upstream_model_it_pins_or_is_refused_naming_the_field(tmp_path: Path) -> None:
    async with FakeProvider(planted_models(), seed=3) as fake:
        path, auth = collector_toml(tmp_path, fake.base_url)
        path.write_text(path.read_text() + VERSIONED)
        server = await open_collector(path)
        api = Api(auth, server.url)
        try:
            suite = await api.suite(await api.dataset(5), EXACT)
            ran = await api.call("POST", PATH, json={
                "suite_id": suite, "baseline": {"type": "model", "ref": "base-m", "version": "2025-01"},
                "candidate": {"type": "model", "ref": "base-m", "version": "2026-01"}})
            assert ran.status_code == 201, ran.text
            done = await finished(api, ran.json()["id"])
            unknown_version = await api.call("POST", PATH, json={
                "suite_id": suite, "baseline": {"type": "model", "ref": "base-m", "version": "2025-01"},
                "candidate": {"type": "model", "ref": "base-m", "version": "2099-01"}})
            unversioned_alias = await api.call("POST", PATH, json={
                "suite_id": suite, "baseline": {"type": "model", "ref": INCUMBENT, "version": "2024-06"},
                "candidate": {"type": "model", "ref": CANDIDATE}})
            empty_version = await api.call("POST", PATH, json={
                "suite_id": suite, "baseline": {"type": "model", "ref": INCUMBENT, "version": ""},
                "candidate": {"type": "model", "ref": CANDIDATE, "version": ""}})
        finally:
            await api.aclose()
            await server.stop()
    # Each version called its own upstream model, once per item; nothing called the bare alias.
    assert fake.calls[INCUMBENT] >= 5 and fake.calls[CANDIDATE] >= 5 and fake.calls["base-m"] == 0
    assert done["pinned"]["baseline"]["upstream_model"] == INCUMBENT
    assert done["pinned"]["candidate"]["upstream_model"] == CANDIDATE
    assert error(unknown_version) == (422, "comparison_invalid", "$.candidate.version")
    assert "2099-01" in unknown_version.json()["error"]["message"]
    assert error(unversioned_alias) == (422, "comparison_invalid", "$.baseline.version")
    assert empty_version.status_code == 201, "the screen's default empty version is no version"


async def test_outputs_take_the_default_empty_lists_and_answer_lists_in_item_order(tmp_path: Path) -> None:
    async with FakeProvider(planted_models(), seed=4) as fake:
        path, auth = collector_toml(tmp_path, fake.base_url)
        server = await open_collector(path)
        api = Api(auth, server.url)
        try:
            ds = await api.dataset(6)
            suite = await api.suite(ds, EXACT)
            listed = (await api.call("GET", f"/v1/datasets/{ds}/versions/1/items", reads_content=True)).json()["items"]
            sides = {"baseline": {"type": "model", "ref": INCUMBENT, "version": ""},
                     "candidate": {"type": "model", "ref": CANDIDATE, "version": ""}}
            default = await api.call("POST", PATH, json={"suite_id": suite, **sides,
                                                         "outputs": {"baseline": [], "candidate": []}})
            assert default.status_code == 201, default.text
            await finished(api, default.json()["id"])
            before = fake.calls[INCUMBENT] + fake.calls[CANDIDATE]
            # One answer per case, in item order: the candidate's are the expected answers, the baseline's wrong.
            given = await api.call("POST", PATH, json={
                "suite_id": suite, **sides,
                "outputs": {"baseline": ["wrong"] * len(listed), "candidate": [it["expected"] for it in listed]}})
            assert given.status_code == 201, given.text
            scored = await finished(api, given.json()["id"])
            calls_for_given = fake.calls[INCUMBENT] + fake.calls[CANDIDATE] - before
            short = await api.call("POST", PATH, json={"suite_id": suite, **sides,
                                                       "outputs": {"candidate": ["only one"]}})
            not_text = await api.call("POST", PATH, json={"suite_id": suite, **sides,
                                                          "outputs": {"baseline": ["a", 3]}})
        finally:
            await api.aclose()
            await server.stop()
    assert len(listed) == 6
    assert fake.calls[INCUMBENT] >= 6 and fake.calls[CANDIDATE] >= 6, "empty lists give nothing: both sides ran"
    row = scored["metrics"][0]
    assert (row["baseline"], row["candidate"]) == (0.0, 1.0), row
    assert calls_for_given == 0
    assert error(short) == (422, "comparison_invalid", "$.outputs.candidate")
    assert "1 answers for the suite's 6 items" in short.json()["error"]["message"]
    assert error(not_text) == (422, "comparison_invalid", "$.outputs.baseline[1]")


AGENTS = f'''
[providers.agents]
kind = "openai"
base_url = "{{base_url}}"
timeout_s = 5.0
[agents.support-bot]
provider = "agents"
model = "{INCUMBENT}"
unknown_cost = true
max_cost_per_call_usd = 0.01
[agents.support-bot.versions]
"7" = "{CANDIDATE}"
[agents.priced-bot]
provider = "agents"
model = "{CANDIDATE}"
input_price_per_mtok = 0.5
output_price_per_mtok = 2.0
[agents.open-ended]
provider = "agents"
unknown_cost = true
'''

TEMPLATE = {"system": "Answer in one line.", "user": "Customer asks: {{input}}"}


async def test_agent_and_prompt_sides_are_called_with_their_cost_bounded(tmp_path: Path) -> None:
    async with FakeProvider(planted_models(), seed=5) as fake:
        path, auth = collector_toml(tmp_path, fake.base_url)
        path.write_text(path.read_text() + AGENTS.replace("{base_url}", fake.base_url))
        server = await open_collector(path)
        api = Api(auth, server.url)
        n = 4
        try:
            suite = await api.suite(await api.dataset(n), [*EXACT, {"name": "pref", "kind": "paired_judge"}])
            prompt = {"type": "prompt", "ref": "support-prompt", "version": "3", "model": INCUMBENT,
                      "template": TEMPLATE}
            agent = {"type": "agent", "ref": "support-bot", "version": "7"}
            ran = await api.call("POST", PATH, json={"suite_id": suite, "baseline": prompt, "candidate": agent})
            assert ran.status_code == 201, ran.text
            cid = ran.json()["id"]
            done = await finished(api, cid)
            group = (await api.call("GET", f"/v1/comparisons/{cid}")).json()
            attempts = (await api.call("GET", f"/v1/comparisons/{cid}/attempts")).json()["attempts"]
            priced = await api.call("POST", PATH, json={"suite_id": suite, "baseline": prompt,
                                                        "candidate": {"type": "agent", "ref": "priced-bot"}})
            refusals = {
                "ghost": await api.call("POST", PATH, json={"suite_id": suite, "baseline": prompt,
                                                            "candidate": {"type": "agent", "ref": "ghost"}}),
                "version": await api.call("POST", PATH, json={"suite_id": suite, "baseline": prompt, "candidate": {
                    "type": "agent", "ref": "support-bot", "version": "99"}}),
                "no_ceiling": await api.call("POST", PATH, json={"suite_id": suite, "baseline": prompt, "candidate": {
                    "type": "agent", "ref": "open-ended"}}),
                "no_template": await api.call("POST", PATH, json={
                    "suite_id": suite, "candidate": agent,
                    "baseline": {"type": "prompt", "ref": "support-prompt", "version": "3", "model": INCUMBENT}}),
                "bad_placeholder": await api.call("POST", PATH, json={
                    "suite_id": suite, "candidate": agent,
                    "baseline": {**prompt, "template": {"user": "{{expected}}"}}}),
                "same_version_two_templates": await api.call("POST", PATH, json={
                    "suite_id": suite, "baseline": prompt,
                    "candidate": {**prompt, "template": {"user": "Other: {{input}}"}}}),
            }
        finally:
            await api.aclose()
            await server.stop()
    sent = [r for r in fake.requests if r.model == INCUMBENT]
    prompts = [r.body["messages"] for r in sent]
    # The prompt side rendered its template over each item and sent it to its model.
    assert [m[0] for m in prompts[:1]] == [{"role": "system", "content": "Answer in one line."}]
    assert sorted(m[1]["content"] for m in prompts[:n]) == sorted(f"Customer asks: question {i}" for i in range(n))
    # The agent side called its endpoint at version 7 (its own model name), once per item.
    agent_calls = [r for r in fake.requests if r.model == CANDIDATE]
    assert len(agent_calls) >= n
    assert all(r.body["messages"][-1]["content"].startswith("question ") for r in agent_calls)
    assert done["pinned"]["candidate"] == {"kind": "agent", "provider": "agents", "upstream_model": CANDIDATE,
                                           "priced": False, "cost": "unknown", "reserved_per_call_micros": 10_000}
    assert done["pinned"]["baseline"]["template_hash"].startswith("tpl_")
    # Unknown cost: each agent call was reserved and charged its declared ceiling, within the cap.
    agent_attempts = [a for a in attempts if a["arm"] == "candidate"]
    assert len(agent_attempts) == n and all(a["status"] == "completed" for a in agent_attempts)
    assert all(a["cost"]["coverage"] == "unknown" for a in agent_attempts)
    ledger = group["run"]["spend"]["ledger"]
    assert ledger["spent_micros"] >= n * 10_000 and ledger["spent_micros"] <= ledger["cap_micros"]
    assert priced.status_code == 201, priced.text
    assert error(refusals["ghost"]) == (422, "comparison_invalid", "$.candidate.ref")
    assert error(refusals["version"]) == (422, "comparison_invalid", "$.candidate.version")
    assert error(refusals["no_ceiling"]) == (422, "spend_unbounded", "$.candidate.ref")
    assert error(refusals["no_template"]) == (422, "comparison_invalid", "$.baseline.template")
    assert error(refusals["bad_placeholder"]) == (422, "comparison_invalid", "$.baseline.template.user")
    assert error(refusals["same_version_two_templates"]) == (422, "comparison_invalid", "$.candidate.version")
    # The judge read each item's own question beside the answers, never the prompt side's template.
    judged = [str(r.body["messages"]) for r in fake.requests if r.model == JUDGE]
    assert len(judged) >= n and all("question " in j and "Answer in one line." not in j for j in judged)


async def test_a_group_arm_version_runs_its_pinned_upstream_model_or_is_refused(tmp_path: Path) -> None:
    async with FakeProvider(planted_models(), seed=6) as fake:
        path, auth = collector_toml(tmp_path, fake.base_url)
        path.write_text(path.read_text() + VERSIONED)
        server = await open_collector(path)
        api = Api(auth, server.url)
        try:
            suite = await api.suite(await api.dataset(3), EXACT)
            body = group_body(suite, primary="exact")
            body["arms"] = [{"name": "today", "model": "base-m", "version": "2025-01"},
                            {"name": "next", "model": "base-m", "version": "2026-01"}]
            ready = (await api.call("POST", "/v1/comparisons/readiness", json=body)).json()
            started = await start_group(api, body, "versions-1")
            assert started.status_code == 201, started.text
            cid = started.json()["id"]

            async def completed() -> bool:
                return (await api.call("GET", f"/v1/comparisons/{cid}")).json()["status"] == "completed"

            await wait_for(completed, what="the group's completion")
            bad = dict(body, arms=[body["arms"][0], {"name": "next", "model": "base-m", "version": "2099-01"}])
            refused = await api.call("POST", "/v1/comparisons/readiness", json=bad)
        finally:
            await api.aclose()
            await server.stop()
    assert [a["resolved"]["upstream_model"] for a in ready["arms"]] == [INCUMBENT, CANDIDATE]
    assert fake.calls[INCUMBENT] == 3 and fake.calls[CANDIDATE] == 3 and fake.calls["base-m"] == 0
    assert error(refused) == (422, "comparison_invalid", "$.arms[1].version")


async def test_a_group_arm_of_kind_agent_calls_the_registered_agent_with_its_cost_bounded(tmp_path: Path) -> None:
    async with FakeProvider(planted_models(), seed=7) as fake:
        path, auth = collector_toml(tmp_path, fake.base_url)
        path.write_text(path.read_text() + AGENTS.replace("{base_url}", fake.base_url))
        server = await open_collector(path)
        api = Api(auth, server.url)
        try:
            suite = await api.suite(await api.dataset(3), EXACT)
            body = group_body(suite, primary="exact")
            body["arms"] = [{"name": "today", "model": INCUMBENT},
                            {"name": "bot", "model": "support-bot", "kind": "agent", "version": "7"}]
            ready = (await api.call("POST", "/v1/comparisons/readiness", json=body)).json()
            started = await start_group(api, body, "agent-arm-1")
            assert started.status_code == 201, started.text
            cid = started.json()["id"]

            async def completed() -> bool:
                return (await api.call("GET", f"/v1/comparisons/{cid}")).json()["status"] == "completed"

            await wait_for(completed, what="the group's completion")
            attempts = (await api.call("GET", f"/v1/comparisons/{cid}/attempts")).json()["attempts"]
            ghost = await api.call("POST", "/v1/comparisons/readiness", json=dict(body, arms=[
                body["arms"][0], {"name": "bot", "model": "ghost", "kind": "agent"}]))
            open_ended = dict(body, arms=[body["arms"][0], {"name": "bot", "model": "open-ended", "kind": "agent"}])
            unbounded = (await api.call("POST", "/v1/comparisons/readiness", json=open_ended)).json()
            refused = await start_group(api, open_ended, "agent-arm-2")
        finally:
            await api.aclose()
            await server.stop()
    bot = ready["arms"][1]["resolved"]
    assert bot["kind"] == "agent" and bot["upstream_model"] == CANDIDATE and bot["cost"] == "unknown"
    assert fake.calls[CANDIDATE] == 3, "the agent arm called its endpoint at version 7, once per item"
    assert [a["cost"]["coverage"] for a in attempts if a["arm"] == "bot"] == ["unknown"] * 3
    assert error(ghost) == (422, "comparison_invalid", "$.arms[1].model")
    assert [(p["code"], p["field"]) for p in unbounded["problems"]] == [("spend_unbounded", "$.arms[1].model")]
    assert error(refused) == (422, "spend_unbounded", "$.arms[1].model")
