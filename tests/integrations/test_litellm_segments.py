"""Per-segment verdicts through a real LiteLLM 1.80.0 proxy (issue 27): the plugin passes the
request's metadata tags and the key's alias as the exchange's ``tags``, and a trial read by
``tag:tier`` and ``tag:key_alias`` tracks the two tiers the callers tagged."""

from __future__ import annotations

from tests.harness import Harness
from tests.integrations.test_litellm_proxy import chat, exchanges_for, sidecar, token  # noqa: F401 (fixture)
from tests.litellm_proxy import Gateway, gateway, litellm_venv  # noqa: F401 (fixtures)


async def test_plugin_passes_metadata_tags_and_the_key_alias_to_a_segmented_trial(
    gateway: Gateway, sidecar: Harness  # noqa: F811
) -> None:
    trial = await sidecar.create_trial(team="team-a", sample_rate=1.0, audit_share=0.0,
                                       segments=["tag:tier", "tag:key_alias"])
    marker = token()
    calls = []
    for i in range(4):
        tier = "reasoning" if i % 2 else "fast"
        calls.append(await chat(gateway.plugin, "sk-team-a", f"question {i} {marker}",
                                extra_body={"metadata": {"tags": [f"tier:{tier}"]}}))
    got = await exchanges_for(gateway, calls)
    tags = [got[c.call_id]["tags"] for c in calls]
    assert [t["tier"] for t in tags] == ["fast", "reasoning", "fast", "reasoning"]
    alias = tags[0]["key_alias"]
    assert alias and all(t["key_alias"] == alias for t in tags)
    view = await sidecar.settle(trial["id"], 4)
    judged = {v["key"]: v["judged"] for v in view["segments"]["values"]}
    assert judged == {"tag:tier=fast": 2, "tag:tier=reasoning": 2, f"tag:key_alias={alias}": 4}
