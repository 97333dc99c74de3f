"""The LiteLLM plugin (``sidecar.integrations.litellm``) over kwargs a real LiteLLM 1.80.0
proxy passed to ``async_log_success_event`` (tests/fixtures/litellm/kwargs/, captured in
front of the fake provider; see the README there), against the real tap.

The six defects of issue 10, each covered by a test that fails against the old callback
(``deploy/gateways/litellm/shadowtrial_callback.py`` before it became a shim):

1. team from the body          — test_item1_the_team_is_the_keys_whatever_the_body_says
2. unknown cost read as zero   — test_item2_an_unpriced_call_has_unknown_cost_not_zero
3. upstream ids as exchange ids — test_item3_the_exchange_id_is_litellm_call_id,
                                 test_item3_repeated_upstream_ids_stay_distinct_cases
4. per-request redaction       — test_item4_the_redaction_header_withholds_content
5. one big exchange, whole batch lost — test_item5_an_oversized_exchange_is_dropped_alone,
                                 test_item5_a_413_splits_the_batch_and_a_big_exchange_goes_alone
6. drops only in a log line    — test_item6_drops_reach_the_sidecar_in_the_stats_header,
                                 test_item6_drops_with_nothing_queued_are_reported_by_an_empty_batch,
                                 test_item6_drops_count_in_the_gateways_prometheus_registry

LiteLLM is not installed in the project's environment: its ``CustomLogger`` is replaced by a
stub module when it cannot be imported (the only LiteLLM name the plugin imports).
"""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import importlib.util
import json
import subprocess
import sys
import time
import types
from pathlib import Path
from typing import Any, AsyncIterator, Callable, Iterator

import httpx
import pytest
import pytest_asyncio

from sidecar.ingest import screen
from sidecar.ingest.plugin_stats import MAX_INSTANCES, PluginStats
from sidecar.ingest.wire import decode_exchanges
from sidecar.integrations import sender, slo
from tests.harness import DELIVERY_TIMEOUT_S, INCUMBENT, Harness, wait_for

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures" / "litellm" / "kwargs"


@pytest_asyncio.fixture
async def taps(plugin: types.ModuleType) -> AsyncIterator[Callable[..., Any]]:
    """``taps(url, **settings)``: a plugin posting to a real sidecar, with DELIVERY_TIMEOUT_S unless
    the test sets ``timeout_s``; each is closed when the test ends, even one that failed before its
    own ``aclose`` (else its connection is collected during a later test, whose warnings check fails)."""
    made: list[Any] = []

    def make(url: str, **settings: Any) -> Any:
        made.append(plugin.ShadowtrialTap(url, **{"timeout_s": DELIVERY_TIMEOUT_S, **settings}))
        return made[-1]

    yield make
    for cb in made:
        await cb.aclose()  # a second close does nothing


def kwargs_of(name: str) -> dict[str, Any]:
    """The kwargs LiteLLM passed for one captured call."""
    data: dict[str, Any] = json.loads((FIXTURES / f"{name}.json").read_text())
    return data


@pytest.fixture
def plugin(monkeypatch: pytest.MonkeyPatch) -> Iterator[types.ModuleType]:
    """``sidecar.integrations.litellm``, over a stub ``CustomLogger`` when LiteLLM is not installed."""
    if importlib.util.find_spec("litellm") is None:
        stub = types.ModuleType("litellm.integrations.custom_logger")

        class CustomLogger:
            def __init__(self, *args: Any, **kwargs: Any) -> None:
                self.message_logging = True

        stub.CustomLogger = CustomLogger  # type: ignore[attr-defined]
        monkeypatch.setitem(sys.modules, "litellm", types.ModuleType("litellm"))
        monkeypatch.setitem(sys.modules, "litellm.integrations", types.ModuleType("litellm.integrations"))
        monkeypatch.setitem(sys.modules, "litellm.integrations.custom_logger", stub)
    from sidecar.integrations import litellm as module

    module._tap_class.cache_clear()
    sender._prometheus_counter.cache_clear()
    yield module
    module._tap_class.cache_clear()
    sender._prometheus_counter.cache_clear()
    module.__dict__.pop("proxy_handler_instance", None)


async def _true(value: bool) -> bool:
    return value


async def metric(h: Harness, line_start: str) -> float | None:
    """The value of the first ``/metrics`` line starting with ``line_start``."""
    assert h.admin
    text = (await h.admin.get("/metrics")).text
    for line in text.splitlines():
        if line.startswith(line_start):
            return float(line.rsplit(" ", 1)[1])
    return None


# -- the module itself ----------------------------------------------------------


def test_the_module_imports_without_litellm_and_nothing_heavy() -> None:
    """It runs in the gateway's environment: standard library, httpx, policies.sampling only;
    LiteLLM is imported when the class is first used."""
    code = (
        "import sys\n"
        "import sidecar.integrations.litellm as m\n"
        "heavy = sorted({k.split('.')[0] for k in sys.modules} & {'aiohttp', 'msgspec', 'numpy', 'litellm'})\n"
        "assert not heavy, heavy\n"
        "try:\n"
        "    m.ShadowtrialTap\n"
        "except ImportError:\n"
        "    print('no-litellm')\n"
        "else:\n"
        "    print('litellm')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    expected = "litellm" if importlib.util.find_spec("litellm") else "no-litellm"
    assert out.stdout.strip() == expected


def test_the_limits_match_the_taps_screen() -> None:
    """The mapping cannot import the screen (msgspec), so it copies its limits: keep them equal."""
    assert slo.MAX_TOKENS_PARAM == screen.MAX_TOKENS_PARAM
    assert slo.MAX_NESTING == screen.MAX_NESTING and slo._ITEM_LEVEL == screen._ITEM_LEVEL


def test_settings_come_from_the_environment(plugin: types.ModuleType) -> None:
    env = {
        "LITELLM_SHADOWTRIAL_TAP_URL": "http://tap/v1/exchanges", "LITELLM_SHADOWTRIAL_BATCH_BYTES": "65536",
        "LITELLM_SHADOWTRIAL_TAP_MAX_BYTES": "1048576", "LITELLM_SHADOWTRIAL_BUFFER_BYTES": "8388608",
        "LITELLM_SHADOWTRIAL_STATS_EVERY_S": "2.5", "LITELLM_SHADOWTRIAL_GATEWAY": "gw-eu",
    }
    cb = plugin.build_from_env(env)
    assert isinstance(cb, plugin.ShadowtrialTap)
    s = cb.sender
    assert (s.tap_url, s.batch_bytes, s.tap_max_bytes, s.buffer_bytes, s.stats_every_s, cb.gateway) == (
        "http://tap/v1/exchanges", 65536, 1048576, 8388608, 2.5, "gw-eu")
    with pytest.raises(ValueError, match="LITELLM_SHADOWTRIAL_BATCH_BYTES"):
        plugin.TapPlugin.from_env({"LITELLM_SHADOWTRIAL_BATCH_BYTES": "1MB"})
    with pytest.raises(ValueError, match="LITELLM_SHADOWTRIAL_BATCH_BYTES"):
        plugin.TapPlugin.from_env({"LITELLM_SHADOWTRIAL_BATCH_BYTES": "0"})


#: Issue 21, item 10: settings that used to stop the gateway (``TIMEOUT_S=0``, ``BATCH=0``
#: exited the proxy with a message about ``batch_size``) or make no sense.
BAD_SETTINGS = {
    "TIMEOUT_S": "0", "BATCH": "0", "BATCH_BYTES": "-1", "TAP_MAX_BYTES": "4MB", "FLUSH_S": "-0.5",
    "BUFFER": "lots", "BUFFER_BYTES": "1e9", "STATS_EVERY_S": "nan", "TAP_URL": "ftp://tap.internal/",
    "ADMIN_URL": "sk-pasted-by-mistake",
}


@pytest.mark.parametrize("name", sorted(BAD_SETTINGS))
def test_item10_a_bad_setting_disables_the_plugin_in_one_line(
    plugin: types.ModuleType, name: str, caplog: pytest.LogCaptureFixture,
) -> None:
    variable = "LITELLM_SHADOWTRIAL_" + name
    with caplog.at_level("INFO", logger="shadowtrial"):
        cb = plugin.build_from_env({variable: BAD_SETTINGS[name], "LITELLM_SHADOWTRIAL_TAP_TOKEN": "sk-tap-secret"})
    assert type(cb).__name__ == "ShadowtrialTapDisabled" and not isinstance(cb, plugin.TapPlugin)
    assert variable in cb.disabled_because
    [record] = caplog.records
    line = record.getMessage()
    assert variable in line and "disabled" in line and "\n" not in line
    # Named as the operator wrote it: no internal parameter, no value (it may be a secret).
    for internal in ("batch_size", "timeout_s", "max_buffer", "tap_max_bytes", "flush_s", "stats_every_s"):
        assert internal not in line
    assert "sk-tap-secret" not in line
    if len(BAD_SETTINGS[name]) > 3:  # ("0" is in "above 0")
        assert BAD_SETTINGS[name] not in line


def test_item10_every_bad_setting_is_named_in_the_one_line(
    plugin: types.ModuleType, caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level("INFO", logger="shadowtrial"):
        cb = plugin.build_from_env({"LITELLM_SHADOWTRIAL_TIMEOUT_S": "0", "LITELLM_SHADOWTRIAL_BATCH": "0"})
    [record] = caplog.records
    assert "LITELLM_SHADOWTRIAL_TIMEOUT_S" in record.getMessage() and "LITELLM_SHADOWTRIAL_BATCH " in record.getMessage()
    assert type(cb).__name__ == "ShadowtrialTapDisabled"
    # Good settings still build the plugin, and an empty variable means its default.
    good = plugin.build_from_env({"LITELLM_SHADOWTRIAL_FLUSH_S": "0", "LITELLM_SHADOWTRIAL_BATCH": ""})
    assert isinstance(good, plugin.TapPlugin) and (good.flush_s, good.sender.batch_size) == (0.0, 100)


# -- item 1: the team -----------------------------------------------------------


def test_item1_the_team_is_the_keys_whatever_the_body_says(plugin: types.ModuleType) -> None:
    cb = plugin.ShadowtrialTap()
    # The captured payloads show the attack: the logged metadata is the body's.
    spoofed = kwargs_of("spoof_litellm_metadata")
    assert spoofed["standard_logging_object"]["metadata"]["user_api_key_team_alias"] == "victim"
    assert spoofed["standard_logging_object"]["model_group"] == "victim-model"
    for name in ("plain_tools", "spoof_litellm_metadata", "spoof_metadata"):
        ex = cb.exchange_from(kwargs_of(name))
        assert ex["team"] == "team-a", name
        assert ex["model"] == INCUMBENT, name  # the router's model group, not the body's
    # A key without a team gets the default team, not the body's.
    assert cb.exchange_from(kwargs_of("no_team_spoof"))["team"] == "default"


# -- item 2: cost -----------------------------------------------------------------


def test_item2_an_unpriced_call_has_unknown_cost_not_zero(plugin: types.ModuleType) -> None:
    cb = plugin.ShadowtrialTap()
    unpriced = kwargs_of("unpriced")
    logged = unpriced["standard_logging_object"]
    assert logged["response_cost"] == 0.0 and not logged["response_cost_failure_debug_info"]  # what LiteLLM says

    def cost(name: str) -> float | None:
        (decoded,) = decode_exchanges(json.dumps(cb.exchange_from(kwargs_of(name))).encode())
        return decoded.response.usage.cost_usd

    assert cost("unpriced") is None
    assert cost("free") == 0.0  # the deployment's model_info declares zero prices
    assert cost("plain_tools") == pytest.approx(logged_cost("plain_tools")) and cost("plain_tools") > 0
    assert cost("map_priced") == pytest.approx(logged_cost("map_priced")) and cost("map_priced") > 0
    # A body that carries prices re-prices the call (LiteLLM 1.80.0): the figure is the caller's.
    assert logged_cost("price_in_body") == 0.0 and cost("price_in_body") is None


def logged_cost(name: str) -> float:
    return float(kwargs_of(name)["standard_logging_object"]["response_cost"])


#: LiteLLM's shipped price of gpt-4o-mini (the ``map-priced`` deployment), USD per token.
MAP_PRICES = {"gpt-4o-mini": (0.15e-6, 0.6e-6)}


def test_item9_a_cost_far_from_the_deployments_price_is_not_sent(plugin: types.ModuleType) -> None:
    """Issue 21, item 9: after a caller re-priced a model for the whole proxy, LiteLLM logs the
    caller's figure for everyone's calls. The plugin compares each cost with the deployment's
    known price — its ``model_info`` (plain_tools), else LiteLLM's map as it stood when the
    plugin was built (map_priced) — and sends none when it is far off."""
    cb = plugin.ShadowtrialTap(known_prices=MAP_PRICES)

    def sent_cost(name: str, factor: float) -> float | None:
        kwargs = kwargs_of(name)
        kwargs["standard_logging_object"]["response_cost"] *= factor
        ex = cb.exchange_from(kwargs)
        assert ex is not None
        cost: float | None = ex["response"]["usage"].get("cost_usd")
        return cost

    for name in ("plain_tools", "map_priced"):
        assert sent_cost(name, 1.0) == pytest.approx(logged_cost(name)), name
        assert sent_cost(name, 1.5) == pytest.approx(1.5 * logged_cost(name)), name  # a long-context tier
        assert sent_cost(name, 0.2) == pytest.approx(0.2 * logged_cost(name)), name  # cached input
        assert sent_cost(name, 1e5) is None, name  # re-priced: $1 a token
        assert sent_cost(name, 1e-3) is None, name
    assert cb.stats()["cost_disputed"] == 4
    # Without a known price (no model_info prices, the model not in the map) the cost is sent as
    # it is: the sidecar then trusts it only for trials that have no price (docs/litellm.md).
    assert plugin.ShadowtrialTap(known_prices={}).exchange_from(kwargs_of("map_priced"))["response"]["usage"][
        "cost_usd"] == pytest.approx(logged_cost("map_priced"))


def test_the_cost_rule() -> None:
    base = {"response_cost": 0.0, "response_cost_failure_debug_info": None, "cache_hit": False}
    assert slo.known_cost(base, zero_is_known=False) is None
    assert slo.known_cost(base, zero_is_known=True) == 0.0
    assert slo.known_cost({**base, "response_cost": 0.25}, zero_is_known=False) == 0.25
    assert slo.known_cost({**base, "response_cost": 0.25}, zero_is_known=False, trusted=False) is None
    assert slo.known_cost({**base, "response_cost": 0.0, "cache_hit": True}, zero_is_known=True) is None
    assert slo.known_cost({**base, "response_cost_failure_debug_info": {"error_str": "x"}}, zero_is_known=True) is None
    for bad in (float("nan"), float("inf"), -1.0, "0.1", True, None, 10**400):
        assert slo.known_cost({**base, "response_cost": bad}, zero_is_known=True) is None, bad


# -- item 3: the exchange id ---------------------------------------------------------


def test_item3_the_exchange_id_is_litellm_call_id(plugin: types.ModuleType) -> None:
    cb = plugin.ShadowtrialTap()
    kwargs = kwargs_of("plain_tools")
    ex = cb.exchange_from(kwargs)
    assert ex["exchange_id"] == kwargs["litellm_call_id"]
    assert ex["exchange_id"] != kwargs["standard_logging_object"]["id"]  # not the upstream's response id
    # A caller's x-litellm-call-id header sets LiteLLM's call id (documented in docs/litellm.md).
    assert cb.exchange_from(kwargs_of("call_id_header"))["exchange_id"] == "caller-chosen-id-1"
    # Without a call id there is no exchange (the upstream's id is never the fallback).
    del kwargs["litellm_call_id"], kwargs["litellm_params"]["litellm_call_id"]
    assert cb.exchange_from(kwargs) is None and cb.stats()["dropped_no_call_id"] == 1
    assert "skipped_incomplete" not in cb.stats()


async def test_item10_an_empty_call_id_is_a_drop_the_sidecar_counts(
    tmp_path: Path, plugin: types.ModuleType, taps: Callable[..., Any],
) -> None:
    """A caller's empty ``x-litellm-call-id`` leaves LiteLLM's call id empty: the exchange cannot
    be a case, and the sidecar's ``/metrics`` counts it with the other drops (it used to be a
    skip only the plugin's own ``stats()`` knew of). What is not an exchange anyway stays a skip."""
    async with Harness(tmp_path) as h:
        cb = taps(h.sidecar.tap_url + "/v1/exchanges", flush_s=0.05, stats_every_s=0.05)
        for i in range(3):
            kwargs = small_kwargs(i)
            kwargs["litellm_call_id"] = kwargs["litellm_params"]["litellm_call_id"] = ""
            await cb.async_log_success_event(kwargs, None, None, None)
        shadow = kwargs_of("shadow_header")
        shadow["litellm_call_id"] = shadow["litellm_params"]["litellm_call_id"] = ""
        await cb.async_log_success_event(shadow, None, None, None)
        await cb.async_log_success_event(small_kwargs(9), None, None, None)
        assert (cb.stats()["dropped_no_call_id"], cb.stats()["skipped_shadow_call"], cb.stats()["queued"]) == (3, 1, 1)
        line = 'shadowtrial_plugin_dropped_total{reason="no_call_id"}'

        async def counted() -> bool:
            return await metric(h, line) == 3

        await wait_for(counted, what="the no_call_id drops in the sidecar's /metrics")
        await wait_for(lambda: _true(cb.stats().get("sent", 0) == 1), what="the good exchange sent")
        assert h.runtime.counters["exchanges_received"] == 1
        await cb.aclose()


async def test_item3_repeated_upstream_ids_stay_distinct_cases(
    tmp_path: Path, plugin: types.ModuleType, taps: Callable[..., Any],
) -> None:
    """An upstream restarted: its response ids repeat, LiteLLM's call ids do not."""
    async with Harness(tmp_path) as h:
        trial = await h.create_trial(sample_rate=1.0)
        cb = taps(h.sidecar.tap_url + "/v1/exchanges", flush_s=0.01)
        first = kwargs_of("plain_tools")
        again = copy.deepcopy(first)
        again["litellm_call_id"] = again["litellm_params"]["litellm_call_id"] = "another-call"
        assert again["standard_logging_object"]["id"] == first["standard_logging_object"]["id"]
        for kwargs in (first, again):
            await cb.async_log_success_event(kwargs, None, None, None)
        await wait_for(lambda: _true(cb.stats().get("sent", 0) == 2), what="2 exchanges sent")
        await cb.aclose()
        view = await h.settle(trial["id"], 2)
        assert "duplicate" not in view["funnel"]["outcomes"], view["funnel"]
        assert h.runtime.counters["cases_sampled"] == 2



@pytest.mark.parametrize("timeout_s", [None, 0.5])
async def test_a_delivery_test_survives_a_sidecar_stalled_past_the_plugins_default_timeout(
    tmp_path: Path, plugin: types.ModuleType, taps: Callable[..., Any], monkeypatch: pytest.MonkeyPatch,
    timeout_s: float | None,
) -> None:
    """What a loaded CI worker did to ``test_item3_...``: the sidecar's loop (here the test's own)
    stalled while a POST was in flight, longer than the plugin's default 0.5 s, and the plugin
    dropped the exchange ``timeout``. The ``taps`` fixture's plugins wait DELIVERY_TIMEOUT_S, so a
    test that needs its POSTs delivered does not fail on the machine's pace; with the default
    timeout (the second case) the same stall is a drop, which is why the fixture exists."""
    import sidecar.api.tap as tap_api

    real_ingest = tap_api.ingest

    def stalled(*args: Any, **kwargs: Any) -> Any:
        time.sleep(0.7)  # the loop stalls inside the tap's handler; not a wait for anything
        return real_ingest(*args, **kwargs)

    monkeypatch.setattr(tap_api, "ingest", stalled)
    async with Harness(tmp_path) as h:
        settings = {} if timeout_s is None else {"timeout_s": timeout_s}
        cb = taps(h.sidecar.tap_url + "/v1/exchanges", flush_s=0.01, **settings)
        await cb.async_log_success_event(small_kwargs(0), None, None, None)
        await wait_for(lambda: _true(cb.stats().get("sent", 0) + cb.stats().get("dropped_timeout", 0) == 1),
                       what="the exchange sent or dropped")
        if timeout_s is None:
            assert cb.stats().get("sent") == 1 and "dropped_timeout" not in cb.stats()
        else:
            assert cb.stats().get("dropped_timeout") == 1 and "sent" not in cb.stats()

# -- item 4: redaction ---------------------------------------------------------------


def test_item4_the_redaction_header_withholds_content(plugin: types.ModuleType) -> None:
    cb = plugin.ShadowtrialTap()
    kwargs = kwargs_of("redaction_header")
    # LiteLLM 1.80.0 logged the content despite the header.
    assert "4111" in json.dumps(kwargs["standard_logging_object"]["messages"])
    ex = cb.exchange_from(kwargs)
    assert ex["redacted"] is True
    assert ex["request"] == {"messages": [], "params": {}} and ex["response"]["content"] is None
    assert "4111" not in json.dumps(ex) and "Answer from" not in json.dumps(ex)


def test_item4_logging_turned_off_withholds_content(plugin: types.ModuleType, monkeypatch: pytest.MonkeyPatch) -> None:
    cb = plugin.ShadowtrialTap()
    # LiteLLM redacted these itself (turn_off_message_logging in litellm_settings).
    for name in ("turn_off_logging", "turn_off_logging_stream"):
        ex = cb.exchange_from(kwargs_of(name))
        assert ex["redacted"] is True and ex["request"]["messages"] == [], name
    plain = kwargs_of("plain_tools")
    assert cb.exchange_from(plain)["redacted"] is False
    # The global switch read from the gateway's litellm module, whatever the payload holds.
    monkeypatch.setattr(sys.modules["litellm"], "turn_off_message_logging", True, raising=False)
    assert cb.exchange_from(plain)["redacted"] is True
    monkeypatch.setattr(sys.modules["litellm"], "turn_off_message_logging", False, raising=False)
    # Per key or team: LiteLLM's dynamic callback params.
    plain["standard_callback_dynamic_params"] = {"turn_off_message_logging": True}
    assert cb.exchange_from(plain)["redacted"] is True


# -- item 5: batches bounded by bytes ---------------------------------------------------


def big_kwargs(i: int, size: int) -> dict[str, Any]:
    kwargs = kwargs_of("plain_tools")
    kwargs["litellm_call_id"] = kwargs["litellm_params"]["litellm_call_id"] = f"big-{i}"
    kwargs["standard_logging_object"]["messages"][-1]["content"] = "x" * size
    return kwargs


def small_kwargs(i: int) -> dict[str, Any]:
    kwargs = kwargs_of("plain_tools")
    kwargs["litellm_call_id"] = kwargs["litellm_params"]["litellm_call_id"] = f"small-{i}"
    return kwargs


class Recording(httpx.AsyncBaseTransport):
    """A real transport that remembers each request's body size and answer."""

    def __init__(self) -> None:
        self.inner = httpx.AsyncHTTPTransport()
        self.posts: list[tuple[int, int]] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        response = await self.inner.handle_async_request(request)
        self.posts.append((len(request.content), response.status_code))
        return response

    async def aclose(self) -> None:
        await self.inner.aclose()


async def test_item5_an_oversized_exchange_is_dropped_alone(
    tmp_path: Path, plugin: types.ModuleType, taps: Callable[..., Any],
) -> None:
    """20 small requests and one 4.5 MB prompt: the tap gets the 20 (the old callback: 0 of 21)."""
    async with Harness(tmp_path) as h:  # the tap's default max_body_bytes, 4 MiB
        cb = taps(h.sidecar.tap_url + "/v1/exchanges", flush_s=0.05)
        for i in range(10):
            await cb.async_log_success_event(small_kwargs(i), None, None, None)
        await cb.async_log_success_event(big_kwargs(0, 4_500_000), None, None, None)
        for i in range(10, 20):
            await cb.async_log_success_event(small_kwargs(i), None, None, None)
        await wait_for(lambda: _true(cb.stats().get("sent", 0) == 20), what="20 exchanges sent")
        await cb.aclose()
        assert cb.stats()["dropped_too_large"] == 1
        assert h.runtime.counters["exchanges_received"] == 20
        assert h.runtime.counters["tap_rejected_too_large"] == 0  # never sent, so never a 413


async def test_item5_a_413_splits_the_batch_and_a_big_exchange_goes_alone(
    tmp_path: Path, plugin: types.ModuleType, taps: Callable[..., Any],
) -> None:
    """The plugin believes the tap takes 4 MiB, the tap takes 300 kB: a 413 for a batch of
    several splits it, and only the exchange the tap cannot take is dropped. One larger than a
    batch but within the tap's limit is sent alone."""
    async with Harness(tmp_path, max_body_bytes=300_000) as h:
        recording = Recording()
        cb = taps(
            h.sidecar.tap_url + "/v1/exchanges", flush_s=0.05, batch_bytes=100_000, transport=recording,
        )
        events = [small_kwargs(i) for i in range(10)] + [big_kwargs(0, 400_000), big_kwargs(1, 150_000)]
        events += [small_kwargs(i) for i in range(10, 20)]
        for kwargs in events:
            await cb.async_log_success_event(kwargs, None, None, None)
        await wait_for(lambda: _true(cb.stats().get("sent", 0) == 21), what="21 exchanges sent")
        await cb.aclose()
        assert cb.stats()["dropped_too_large"] == 1 and h.runtime.counters["exchanges_received"] == 21
        # Every accepted POST fits a batch, except the 150 kB exchange, which went alone.
        accepted = [size for size, status in recording.posts if status == 202]
        assert sum(size > 100_000 for size in accepted) == 1
        assert [status for size, status in recording.posts if size > 300_000] == [413]


async def test_a_full_buffer_sheds_the_newest(plugin: types.ModuleType) -> None:
    cb = plugin.ShadowtrialTap("http://127.0.0.1:9/v1/exchanges", max_buffer=3, timeout_s=0.2)
    for i in range(5):
        await cb.async_log_success_event(small_kwargs(i), None, None, None)
    assert cb.stats()["dropped_buffer_full"] == 2 and cb.stats()["queued"] == 3
    size = len(json.dumps(cb.exchange_from(small_kwargs(0)), ensure_ascii=False, separators=(",", ":")).encode())
    by_bytes = plugin.ShadowtrialTap("http://127.0.0.1:9/v1/exchanges", buffer_bytes=size * 3, timeout_s=0.2)
    for i in range(5):
        await by_bytes.async_log_success_event(small_kwargs(i), None, None, None)
    assert by_bytes.stats()["dropped_buffer_full"] == 2 and by_bytes.stats()["queued"] == 3
    await cb.aclose()
    await by_bytes.aclose()


class FlakyTap(httpx.AsyncBaseTransport):
    """A tap that refuses connections until told it is up; counts every attempt."""

    def __init__(self) -> None:
        self.up = False
        self.attempts = 0

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        self.attempts += 1
        if not self.up:
            raise httpx.ConnectError("connection refused", request=request)
        return httpx.Response(202, json={"accepted": 0, "sampled": 0, "shed": 0})


async def test_a_tap_that_is_down_is_left_alone_for_a_back_off(
    plugin: types.ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    """While the tap is down the gateway neither connects nor serialises per exchange: one
    attempt per back-off (1 s, doubling), everything between dropped at once and counted."""
    from sidecar.integrations import sender as sender_module

    clock = [1000.0]
    monkeypatch.setattr(sender_module.time, "monotonic", lambda: clock[0])
    tap = FlakyTap()
    cb = plugin.ShadowtrialTap("http://127.0.0.1:9/v1/exchanges", flush_s=0, stats_every_s=3600, transport=tap)
    sender = cb.sender

    async def flushed() -> None:
        if sender._flusher is not None:
            await sender._flusher

    await cb.async_log_success_event(small_kwargs(0), None, None, None)
    await flushed()
    assert tap.attempts == 1 and cb.stats()["dropped_unreachable"] == 1
    for i in range(1, 51):  # within the back-off: no connection, no serialising
        await cb.async_log_success_event(small_kwargs(i), None, None, None)
    await flushed()
    assert tap.attempts == 1 and cb.stats()["dropped_unreachable"] == 51 and cb.stats()["queued"] == 1
    clock[0] += 1.01  # the first back-off is over: one more attempt, which fails and doubles it
    await cb.async_log_success_event(small_kwargs(51), None, None, None)
    await flushed()
    assert tap.attempts == 2
    clock[0] += 1.5  # within the doubled back-off (2 s)
    await cb.async_log_success_event(small_kwargs(52), None, None, None)
    assert tap.attempts == 2 and cb.stats()["dropped_unreachable"] == 53
    tap.up = True
    clock[0] += 0.6  # past it: the tap answers, the back-off ends, exchanges flow again
    for i in range(53, 56):
        await cb.async_log_success_event(small_kwargs(i), None, None, None)
        await flushed()
    assert cb.stats()["sent"] == 3 and cb.stats()["dropped_unreachable"] == 53
    await cb.aclose()


async def test_the_hook_only_keeps_the_call_and_maps_later_in_short_batches(
    tmp_path: Path, plugin: types.ModuleType, taps: Callable[..., Any], monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The hook runs in the gateway right after each call; mapping and serialising there cost
    the proxy about 150 us a call (issue 29). It now only keeps the kwargs: the calls are
    mapped together ``flush_s`` later, or as soon as MAP_BATCH wait, at most MAP_BATCH in one
    turn of the event loop."""
    async with Harness(tmp_path) as h:
        cb = taps(h.sidecar.tap_url + "/v1/exchanges", flush_s=3600)
        mapped: list[str] = []
        turns: list[int] = []
        exchange_from, map_pending = cb.exchange_from, cb._map_pending

        def counting(kwargs: dict[str, Any]) -> Any:
            mapped.append(str(kwargs.get("litellm_call_id")))
            return exchange_from(kwargs)

        def batch(limit: int | None = None) -> None:
            before = len(mapped)
            map_pending(limit)
            turns.append(len(mapped) - before)

        monkeypatch.setattr(cb, "exchange_from", counting)
        monkeypatch.setattr(cb, "_map_pending", batch)
        n = plugin.MAP_BATCH + 8
        for i in range(n - 1):
            await cb.async_log_success_event(small_kwargs(i), None, None, None)
        assert mapped == []  # nothing mapped in the hook (and the event loop has not turned since)
        await cb.async_log_success_event(small_kwargs(n - 1), None, None, None)
        await wait_for(lambda: _true(len(mapped) == n), what="every call mapped")
        assert mapped == [f"small-{i}" for i in range(n)]
        assert max(turns) <= plugin.MAP_BATCH and sum(turns) == n
        await wait_for(lambda: _true(cb.sender.counts["sent"] == n), what="the exchanges sent")
        await cb.aclose()


def test_stats_outside_the_event_loop_leave_the_waiting_calls_waiting(plugin: types.ModuleType) -> None:
    """``stats()`` maps the calls waiting only on the event loop: outside it the sender could
    not start its tasks and the calls would be lost as ``error`` drops."""
    cb = plugin.ShadowtrialTap("http://127.0.0.1:9/v1/exchanges")

    async def hand_over() -> None:
        await cb.async_log_success_event(small_kwargs(1), None, None, None)

    asyncio.run(hand_over())
    assert not any(k.startswith("dropped_") for k in cb.stats()) and len(cb._pending) == 1


async def test_the_drop_report_waits_out_the_back_off(plugin: types.ModuleType) -> None:
    """Drops while the tap is down: the empty stats POST that reports them is a probe too and
    waits for the back-off to end. It used to probe every ``stats_every_s``, whatever the
    back-off (issue 29: a stopped or hung sidecar cost the gateway a connection every 5 s)."""
    tap = FlakyTap()
    times: list[float] = []
    handle = tap.handle_async_request

    async def timed(request: httpx.Request) -> httpx.Response:
        times.append(time.monotonic())
        return await handle(request)

    tap.handle_async_request = timed  # type: ignore[method-assign]
    tap_sender = sender.TapSender("http://127.0.0.1:9/v1/exchanges", flush_s=0, stats_every_s=0.01, transport=tap)
    tap_sender.offer({"exchange_id": "x-1"})
    assert tap_sender._flusher is not None
    await tap_sender._flusher  # the POST fails: the tap is down for the first back-off
    down_until = tap_sender._down_until
    assert tap.attempts == 1 and tap_sender.dropped["unreachable"] == 1 and down_until > time.monotonic()
    tap_sender.drop("error", 1)
    await wait_for(lambda: _true(tap.attempts >= 2), what="the drop report's POST")
    assert times[1] >= down_until  # not within the back-off
    await tap_sender.aclose()


async def test_while_the_tap_is_down_exchanges_are_dropped_unmapped_and_skips_stay_skips(
    plugin: types.ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A stopped or hung sidecar must cost the gateway least (issue 29): during the back-off
    a plain chat call is dropped before the mapping runs; the sidecar's own calls and
    embeddings are still mapped, and counted as the skips they are, not as drops."""
    from sidecar.integrations import sender as sender_module

    clock = [1000.0]
    monkeypatch.setattr(sender_module.time, "monotonic", lambda: clock[0])
    tap = FlakyTap()
    cb = plugin.ShadowtrialTap("http://127.0.0.1:9/v1/exchanges", flush_s=0, stats_every_s=3600, transport=tap)
    mapped: list[str] = []
    exchange_from = cb.exchange_from

    def counting(kwargs: dict[str, Any]) -> Any:
        mapped.append(str(kwargs.get("litellm_call_id")))
        return exchange_from(kwargs)

    monkeypatch.setattr(cb, "exchange_from", counting)
    await cb.async_log_success_event(small_kwargs(0), None, None, None)
    assert cb.sender._flusher is not None
    await cb.sender._flusher
    assert tap.attempts == 1 and cb.sender.down_reason() == "unreachable" and mapped == ["small-0"]
    for i in range(1, 21):
        await cb.async_log_success_event(small_kwargs(i), None, None, None)
    shadow, embedding = kwargs_of("shadow_header"), kwargs_of("embedding_failure")
    await cb.async_log_success_event(shadow, None, None, None)
    await cb.async_log_success_event(embedding, None, None, None)
    assert mapped == ["small-0", str(shadow.get("litellm_call_id")), str(embedding.get("litellm_call_id"))]
    stats = cb.stats()
    assert stats["dropped_unreachable"] == 21 and stats["skipped_shadow_call"] == 1 and stats["queued"] == 1
    assert sum(v for k, v in stats.items() if k.startswith("skipped_")) == 2
    await cb.aclose()


# -- item 6: drops as metrics ----------------------------------------------------------------


async def test_item6_drops_reach_the_sidecar_in_the_stats_header(
    tmp_path: Path, plugin: types.ModuleType, taps: Callable[..., Any],
) -> None:
    async with Harness(tmp_path) as h:
        cb = taps(h.sidecar.tap_url + "/v1/exchanges", max_buffer=2, flush_s=0.05)
        for i in range(5):  # one tick: the first two are buffered, three are shed
            await cb.async_log_success_event(small_kwargs(i), None, None, None)
        assert cb.stats_header() == json.dumps(
            {"instance": cb.sender.instance, "dropped": {"buffer_full": 3}}, separators=(",", ":"))
        await wait_for(lambda: _true(cb.stats().get("sent", 0) == 2), what="2 exchanges sent")
        assert await metric(h, 'shadowtrial_plugin_dropped_total{reason="buffer_full"}') == 3
        # A second instance adds up; counts are cumulative per instance, never double-counted.
        other = taps(h.sidecar.tap_url + "/v1/exchanges", max_buffer=1, flush_s=0.05)
        for i in range(3):
            await other.async_log_success_event(small_kwargs(i), None, None, None)
        await wait_for(lambda: _true(other.stats().get("sent", 0) == 1), what="1 exchange sent")
        await cb.async_log_success_event(small_kwargs(9), None, None, None)  # the first reports again
        await wait_for(lambda: _true(cb.stats().get("sent", 0) == 3), what="3 exchanges sent")
        assert await metric(h, 'shadowtrial_plugin_dropped_total{reason="buffer_full"}') == 5
        assert await metric(h, 'shadowtrial_plugin_dropped_total{reason="too_large"}') == 0
        await cb.aclose()
        await other.aclose()


async def test_item6_drops_with_nothing_queued_are_reported_by_an_empty_batch(
    tmp_path: Path, plugin: types.ModuleType, taps: Callable[..., Any]
) -> None:
    async with Harness(tmp_path) as h:
        cb = taps(h.sidecar.tap_url + "/v1/exchanges", tap_max_bytes=100, stats_every_s=0.05)
        for i in range(4):  # each is too large for the tap: dropped, nothing is queued
            await cb.async_log_success_event(small_kwargs(i), None, None, None)
        assert cb.stats()["dropped_too_large"] == 4 and cb.stats().get("queued", 0) == 0

        async def reported() -> bool:
            return await metric(h, 'shadowtrial_plugin_dropped_total{reason="too_large"}') == 4

        await wait_for(reported, what="the drops reported")
        assert h.runtime.counters["exchanges_received"] == 0
        reporter = cb.sender._reporter
        assert reporter is not None
        await wait_for(lambda: _true(reporter.done()), what="the reporter to rest")  # nothing left to report
        await cb.aclose()


async def test_item6_drops_count_in_the_gateways_prometheus_registry(
    plugin: types.ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With ``prometheus_client`` importable in the gateway, drops also count in its default
    registry (a hand-written fake of the two calls used: the project does not depend on it)."""
    incs: list[tuple[str, str, float]] = []

    class Counter:
        def __init__(self, name: str, documentation: str, labelnames: list[str]) -> None:
            self.name = name
            assert labelnames == ["reason"]

        def labels(self, **labels: str) -> Any:
            counter = self

            class Child:
                def inc(self, amount: float = 1) -> None:
                    incs.append((counter.name, labels["reason"], amount))

            return Child()

    fake = types.ModuleType("prometheus_client")
    fake.Counter = Counter  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "prometheus_client", fake)
    sender._prometheus_counter.cache_clear()
    cb = plugin.ShadowtrialTap("http://127.0.0.1:9/v1/exchanges", tap_max_bytes=100, timeout_s=0.2, stats_every_s=60)
    await cb.async_log_success_event(small_kwargs(1), None, None, None)
    await cb.async_log_success_event(small_kwargs(2), None, None, None)
    cb.stats()  # the calls the hook kept are mapped (and their drops counted) now
    assert incs == [("shadowtrial_plugin_dropped_total", "too_large", 1)] * 2
    second = plugin.ShadowtrialTap()  # one counter per process, shared by instances
    assert second.sender._prometheus is cb.sender._prometheus
    await cb.aclose()


def test_the_sidecar_keeps_plugin_stats_bounded() -> None:
    stats = PluginStats()
    assert stats.record('{"instance":"a1","dropped":{"timeout":2,"buffer_full":1}}')
    assert stats.record('{"instance":"a1","dropped":{"timeout":3,"buffer_full":1,"made_up":7}}')
    assert stats.record('{"instance":"a1","dropped":{"timeout":1}}')  # lower: ignored per reason
    totals = stats.totals()
    assert (totals["timeout"], totals["buffer_full"], totals["other"]) == (3, 1, 7)
    for bad in ("", "x" * 5000, "[]", "{", '{"instance":"a b","dropped":{}}', '{"instance":"a","dropped":{"x":-1}}',
                '{"instance":"a","dropped":{"x":1.5}}', '{"instance":"a","dropped":[]}', "[" * 1500):
        assert not stats.record(bad), bad
    assert stats.ignored == 9
    # At most MAX_INSTANCES kept; an evicted one's counts stay in the sum.
    for i in range(MAX_INSTANCES + 10):
        stats.record(json.dumps({"instance": f"i{i}", "dropped": {"unreachable": 1}}))
    assert len(stats) == MAX_INSTANCES
    assert stats.totals()["unreachable"] == MAX_INSTANCES + 10 and stats.totals()["timeout"] == 3
    assert set(stats.totals()) == {"buffer_full", "too_large", "timeout", "unreachable", "http_4xx", "http_5xx",
                                   "error", "no_call_id", "other"}


async def test_malformed_stats_headers_never_fail_a_batch(tmp_path: Path) -> None:
    async with Harness(tmp_path) as h:
        assert h.tap
        r = await h.tap.post("/v1/exchanges", content=b"[]", headers={"Shadowtrial-Plugin-Stats": "{not json"})
        assert r.status_code == 202
        assert await metric(h, "shadowtrial_plugin_stats_ignored_total") == 1


# -- what stays as it was ------------------------------------------------------------------


async def test_the_hook_never_awaits_and_never_raises(plugin: types.ModuleType) -> None:
    cb = plugin.ShadowtrialTap("http://127.0.0.1:9/v1/exchanges", timeout_s=0.2)
    # Driven by hand: the coroutine finishes on its first step, so it suspended on nothing.
    step = cb.async_log_success_event(small_kwargs(1), None, None, None)
    with pytest.raises(StopIteration):
        step.send(None)
    for odd in (None, {}, {"standard_logging_object": 5}, {"standard_logging_object": {"call_type": []}},
                {"litellm_params": "x", "standard_logging_object": {"call_type": "acompletion", "messages": [1]}}):
        await cb.async_log_success_event(odd, None, None, None)
    stats = cb.stats()
    assert stats["queued"] == 1 and stats.get("dropped_error", 0) == 1  # None is not a mapping
    await cb.aclose()


def test_what_is_sent_and_what_is_not(plugin: types.ModuleType) -> None:
    cb = plugin.ShadowtrialTap()
    ex = cb.exchange_from(kwargs_of("plain_tools"))
    # Allow-listed parameters only: no "user", no "stream", no prices or credentials.
    assert set(ex["request"]["params"]) == {"temperature", "max_tokens", "tools", "tool_choice"}
    assert "sk-fake" not in json.dumps(ex)
    assert ex["route"] == "/v1/chat/completions" and ex["gateway"] == "litellm" and ex["latency_ms"] > 0
    streamed = cb.exchange_from(kwargs_of("stream"))
    assert streamed["response"]["content"].startswith("Answer from inc-model")
    assert cb.exchange_from(kwargs_of("shadow_header")) is None  # the sidecar's own call
    assert cb.exchange_from(kwargs_of("embedding_failure")) is None
    assert cb.stats()["skipped_shadow_call"] == 1 and cb.stats()["skipped_not_chat"] == 1
    for path in sorted(FIXTURES.glob("*.json")):  # all the tap takes, as built
        built = cb.exchange_from(kwargs_of(path.stem))
        if built is not None:
            screen.screen_batch([("$", decode_exchanges(json.dumps(built).encode())[0])])


def test_an_exchange_the_tap_would_refuse_is_skipped(plugin: types.ModuleType) -> None:
    cb = plugin.ShadowtrialTap()
    zero = kwargs_of("plain_tools")
    zero["standard_logging_object"]["model_parameters"]["max_tokens"] = 0
    deep = kwargs_of("plain_tools")
    nested: Any = "x"
    for _ in range(70):
        nested = [nested]
    deep["standard_logging_object"]["messages"][0]["content"] = nested
    assert cb.exchange_from(zero) is None and cb.exchange_from(deep) is None
    assert cb.stats()["skipped_invalid"] == 2


def test_a_plain_http_tap_loads_no_certificates_and_an_https_one_verifies() -> None:
    """The sender's client loads the CA bundle only when it speaks TLS: loading it for a
    plain-HTTP loopback tap cost each gateway worker 0.1-0.3 s of CPU (issue 29)."""
    import ssl

    def context(client: httpx.AsyncClient) -> ssl.SSLContext:
        pool = client._transport._pool  # type: ignore[attr-defined]
        return pool._ssl_context  # type: ignore[no-any-return]

    plain = sender.TapSender("http://127.0.0.1:1/v1/exchanges").http()
    assert context(plain).verify_mode == ssl.CERT_NONE and context(plain).cert_store_stats()["x509_ca"] == 0
    for tls in (sender.TapSender("https://tap.example/v1/exchanges"),
                sender.TapSender("http://127.0.0.1:1/v1/exchanges", also_https=True)):
        assert context(tls.http()).verify_mode == ssl.CERT_REQUIRED
        assert context(tls.http()).cert_store_stats()["x509_ca"] > 0


async def test_aclose_right_after_an_offer_sends_at_once() -> None:
    """``aclose()`` before the flusher first ran used to let it start a whole ``flush_s`` wait."""
    tap = FlakyTap()
    tap.up = True
    tap_sender = sender.TapSender("http://127.0.0.1:9/v1/exchanges", flush_s=3600, transport=tap)
    tap_sender.offer({"exchange_id": "x-1"})
    async with asyncio.timeout(10):
        await tap_sender.aclose()
    assert tap_sender.counts["sent"] == 1 and tap.attempts == 1


async def test_the_drop_reporter_waits_for_a_flush_on_its_way_without_spinning() -> None:
    """Drops while a batch waits out its ``flush_s`` (the last POST long ago): the reporter
    leaves the report to that batch. It used to loop on zero-second sleeps through the whole
    wait, thousands of event-loop turns in the gateway (issue 29: a hung sidecar cost the
    proxy more than a live one)."""
    tap = FlakyTap()
    tap.up = True
    tap_sender = sender.TapSender("http://127.0.0.1:9/v1/exchanges", flush_s=0.2, stats_every_s=0.01, transport=tap)
    checks = 0
    unreported = tap_sender._unreported

    def counting() -> bool:
        nonlocal checks
        checks += 1
        return unreported()

    tap_sender._unreported = counting  # type: ignore[method-assign]
    tap_sender.offer({"exchange_id": "x-1"})  # a batch of one: its flusher waits flush_s for more
    tap_sender.drop("error", 1)
    flusher, reporter = tap_sender._flusher, tap_sender._reporter
    assert flusher is not None and reporter is not None
    async with asyncio.timeout(10):
        await flusher
        await reporter
    assert tap_sender.counts["sent"] == 1 and tap.attempts == 1  # the batch carried the drop report
    assert checks <= 5, checks
    await tap_sender.aclose()


# -- the mapping's short path (issue 29) ------------------------------------------


def _reference_exchange(cb: Any, kwargs: dict[str, Any]) -> tuple[dict[str, Any] | None, str | None]:
    """What the plugin sends for ``kwargs`` by the general path: its :class:`slo.Context`
    (``context_of``), the disputed-cost rule applied, then :func:`slo.to_exchange`. The
    exchange, or None and the skip's reason."""
    from sidecar.integrations import litellm_prices

    ctx = cb.context_of(kwargs)
    params = kwargs.get("litellm_params") or {}
    metadata = params.get("metadata") or {}
    model_info = metadata.get("model_info") or params.get("model_info") or {}
    logged = kwargs["standard_logging_object"]
    if ctx.cost_trusted and litellm_prices.disputed(logged, litellm_prices.known_price(model_info, logged, cb._known_prices)):
        ctx = dataclasses.replace(ctx, cost_trusted=False)
    mapped = slo.to_exchange(logged, ctx)
    return (None, mapped.reason) if isinstance(mapped, slo.Skip) else (mapped, None)


def _variants() -> Iterator[tuple[str, dict[str, Any]]]:
    """Every captured call, and changes of the fields the short path decides on."""
    for path in sorted(FIXTURES.glob("*.json")):
        yield path.stem, kwargs_of(path.stem)
    for cost in (0, 0.0, -0.0, -1.0, 1e-4, 45.0, "0.1", True, float("nan"), float("inf"), None):
        for name in ("plain_tools", "free", "unpriced", "map_priced", "price_in_body"):
            kwargs = kwargs_of(name)
            kwargs["standard_logging_object"]["response_cost"] = cost
            yield f"{name} cost={cost!r}", kwargs
    headers: list[dict[Any, Any]] = [
        {"X-ShadowTrial-Shadow": "1"}, {"x-shadowtrial-shadow-not": "1"}, {"X-LiteLLM-Enable-Message-Redaction": ""},
        {"Litellm-Enable-Message-Redaction": "false"}, {"x-litellm-enable-message-redaction-x": "true"},
        {5: "x", "x-shadowtrial-shadow": ""}, {}, {"ΑΣ": "1", "x-litellm-enable-message-redaction": "1"},
    ]
    for extra in headers:
        kwargs = kwargs_of("plain_tools")
        proxy_request = kwargs["litellm_params"]["proxy_server_request"]
        proxy_request["headers"] = {**proxy_request["headers"], **extra}
        yield f"headers {extra!r}", kwargs
    for body in ({"input_cost_per_token": 1}, {"metadata": {"base_model": "x"}}, {7: "x"}, "not a dict"):
        kwargs = kwargs_of("plain_tools")
        kwargs["litellm_params"]["proxy_server_request"]["body"] = body
        yield f"body {body!r}", kwargs
    for dynamic in (None, {}, {"turn_off_message_logging": " Yes "}, {"turn_off_message_logging": False}, []):
        kwargs = kwargs_of("plain_tools")
        kwargs["standard_callback_dynamic_params"] = dynamic
        yield f"dynamic {dynamic!r}", kwargs
    for model_info in ({"input_cost_per_token": 0, "output_cost_per_token": 0.0}, {"input_cost_per_token": 0},
                       {"input_cost_per_token": "0", "output_cost_per_token": 0}, None):
        kwargs = kwargs_of("free")
        kwargs["litellm_params"]["metadata"]["model_info"] = model_info
        kwargs["litellm_params"]["model_info"] = model_info
        yield f"model_info {model_info!r}", kwargs
    kwargs = kwargs_of("plain_tools")
    kwargs["standard_logging_object"]["startTime"] = 17e8
    kwargs["standard_logging_object"]["endTime"] = float("nan")
    yield "times", kwargs


def test_the_plugins_short_path_sends_what_the_general_mapping_does(plugin: types.ModuleType) -> None:
    """``exchange_from`` builds the exchange without a Context, looking up the deployment's
    price only for a cost that needs it (issue 29): on every captured call and on changes of
    each field it decides on, it sends and skips exactly what ``to_exchange`` over
    ``context_of`` does."""
    cb = plugin.ShadowtrialTap(known_prices=MAP_PRICES)
    for label, kwargs in _variants():
        expected, reason = _reference_exchange(cb, copy.deepcopy(kwargs))
        before = cb.stats()
        got = cb.exchange_from(kwargs)
        after = cb.stats()
        if expected is None:
            assert got is None, label
            assert after.get(f"skipped_{reason}", 0) == before.get(f"skipped_{reason}", 0) + 1, label
        else:
            assert got is not None, label
            assert json.dumps(got, sort_keys=True) == json.dumps(expected, sort_keys=True), label
    # The variants reach each branch: sent with and without a cost, redacted, skipped.
    assert cb.stats()["skipped_shadow_call"] >= 2 and cb.stats()["cost_disputed"] >= 1


def test_the_down_paths_first_look_tells_the_mappings_skips(plugin: types.ModuleType) -> None:
    """While the tap is down, a call is dropped unmapped only if the mapping would not have
    skipped it as not a chat, failed or the sidecar's own: on every variant above, and with
    the headers only in the metadata (the first look reads them where exchange_from does)."""
    cb = plugin.ShadowtrialTap(known_prices=MAP_PRICES)
    variants = list(_variants())
    for extra in ({"X-Shadowtrial-Shadow": "1"}, {"accept": "x"}, {}):
        kwargs = kwargs_of("plain_tools")
        kwargs["litellm_params"]["metadata"]["headers"] = extra
        kwargs["litellm_params"]["proxy_server_request"]["headers"] = {}
        variants.append((f"metadata headers {extra!r}", kwargs))
    for label, kwargs in variants:
        plain = plugin._plainly_an_exchange(kwargs)
        _expected, reason = _reference_exchange(cb, kwargs)
        if reason is None:
            assert plain, label
        elif reason in ("not_chat", "failed", "shadow_call"):
            assert not plain, label
    assert sum(plugin._plainly_an_exchange(k) for _, k in variants) > 0


def test_the_header_flags_read_names_as_litellm_does() -> None:
    """The first look at all the names together never hides a header (issue 29)."""
    assert all(slo._REDACTION_PART in name for name in slo.REDACTION_HEADERS)
    cases: list[tuple[dict[Any, Any], tuple[bool, bool]]] = [
        ({}, (False, False)),
        ({"Content-Type": "x", "Authorization": "y"}, (False, False)),
        ({"X-Shadowtrial-Shadow": ""}, (True, False)),
        ({"x-shadowtrial-shadow-not": "1"}, (False, False)),
        ({"X-LITELLM-ENABLE-MESSAGE-REDACTION": "false"}, (False, True)),
        ({"litellm-enable-message-redaction": ""}, (False, False)),  # present but empty: not asked
        ({"x-litellm-enable-message-redaction-x": "1"}, (False, False)),
        ({3: "1", b"x-shadowtrial-shadow": "1"}, (False, False)),  # str(b"...") is "b'...'"
        ({"a": 1, "x-shadowtrial-shadow\nx": 1}, (False, False)),
    ]
    for headers, expected in cases:
        assert slo._header_flags(headers) == expected, headers
        assert slo.has_shadow_header(headers) == expected[0] == slo.has_header(headers, (slo.SHADOW_HEADER,)), headers
        assert expected[1] == slo.requests_redaction(headers), headers
