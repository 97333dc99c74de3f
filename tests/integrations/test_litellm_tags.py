"""The LiteLLM plugin passes the request's metadata tags and the key's alias as the exchange's
``tags`` (issue 27), within the tap's bounds, over kwargs a real LiteLLM 1.80.0 proxy passed."""

from __future__ import annotations

import json
import types

from policies.segments import MAX_TAGS, tags_from_labels
from sidecar.ingest import screen
from sidecar.ingest.wire import decode_exchanges
from tests.integrations.test_litellm_plugin import kwargs_of, plugin  # noqa: F401 (the fixture)


def test_request_tags_and_the_keys_alias_become_tags(plugin: types.ModuleType) -> None:  # noqa: F811
    cb = plugin.ShadowtrialTap()
    kwargs = kwargs_of("plain_tools")
    kwargs["standard_logging_object"]["request_tags"] = ["tier:reasoning", "beta", "User-Agent: curl/8"]
    # A body's litellm_metadata can replace the payload's metadata: the alias comes from the key's.
    kwargs["standard_logging_object"]["metadata"]["user_api_key_alias"] = "forged"
    ex = cb.exchange_from(kwargs)
    assert ex["tags"] == {"tier": "reasoning", "tags": "beta", "key_alias": "key-a"}
    screen.screen_batch([("$", decode_exchanges(json.dumps(ex).encode())[0])])


def test_too_many_or_too_long_tags_are_cut_to_what_the_tap_takes(plugin: types.ModuleType) -> None:  # noqa: F811
    cb = plugin.ShadowtrialTap()
    kwargs = kwargs_of("plain_tools")
    kwargs["standard_logging_object"]["request_tags"] = [f"k{i}:{'v' * 300}" for i in range(40)] + ["n" * 200]
    ex = cb.exchange_from(kwargs)
    assert len(ex["tags"]) == MAX_TAGS
    screen.screen_batch([("$", decode_exchanges(json.dumps(ex).encode())[0])])  # accepted, not refused
    tags, cut = tags_from_labels([f"k{i}:{'v' * 300}" for i in range(40)], "alias")
    assert cut == 40 and len(tags) == MAX_TAGS - 1


def test_a_call_without_labels_gets_the_tags_tags_from_labels_makes() -> None:
    """The mapping skips ``tags_from_labels`` when a call has no labels (most calls; issue 29):
    what it builds instead must be what that function makes of the alias alone."""
    from sidecar.integrations import slo

    for labels in (None, [], "", 0, ["beta"], "tier:x"):
        for alias in (None, "", "key-a", "a" * 500, 7):
            ctx = slo.Context(team="t", gateway="g", key_alias=alias if isinstance(alias, str) else None)
            payload = {"request_tags": labels, "metadata": {"user_api_key_alias": alias}}
            expected = tags_from_labels(labels if isinstance(labels, list) else [],
                                        ctx.key_alias if ctx.key_alias is not None else alias)[0]
            assert slo.exchange_tags(payload, ctx) == expected, (labels, alias)
            assert slo._tags(payload, ctx, payload["metadata"]) == expected, (labels, alias)
