"""LiteLLM price maps and name resolution: unpriced is None, never zero."""

from __future__ import annotations

import json
import pathlib

import pytest

from policies.money import Price
from sidecar.errors import ConfigError
from sidecar.prices import AliasEntry, PriceBook, load_price_map, parse_price_map

FIXTURE = pathlib.Path(__file__).parent.parent / "fixtures" / "model_prices_small.json"


@pytest.fixture(scope="module")
def price_map() -> dict[str, Price]:
    return load_price_map(str(FIXTURE))


def test_loads_per_token_dollars_as_micros_per_million(price_map: dict[str, Price]) -> None:
    # $0.15 / $0.60 per million tokens.
    assert price_map["gpt-4o-mini"] == Price(150_000, 600_000)
    assert price_map["claude-3-5-haiku-20241022"] == Price(800_000, 4_000_000)
    assert price_map["groq/llama3-8b-8192"] == Price(50_000, 80_000)


def test_sample_spec_is_skipped_although_its_costs_are_numbers(price_map: dict[str, Price]) -> None:
    raw = json.loads(FIXTURE.read_text(encoding="utf-8"))
    assert raw["sample_spec"]["input_cost_per_token"] == 0
    assert "sample_spec" not in price_map


def test_entries_without_both_token_costs_are_left_out_not_zero(price_map: dict[str, Price]) -> None:
    for name in ("whisper-1", "standard/1024-x-1024/dall-e-3", "cohere/rerank-english-v3.0"):
        assert name not in price_map


def test_explicit_zero_costs_are_kept_as_known_zero(price_map: dict[str, Price]) -> None:
    assert price_map["ollama/llama3"] == Price(0, 0)
    assert price_map["text-embedding-3-small"] == Price(20_000, 0)


def test_every_fixture_entry_with_both_costs_is_loaded(price_map: dict[str, Price]) -> None:
    raw = json.loads(FIXTURE.read_text(encoding="utf-8"))
    expected = {
        name
        for name, entry in raw.items()
        if name != "sample_spec" and "input_cost_per_token" in entry and "output_cost_per_token" in entry
    }
    assert set(price_map) == expected


@pytest.mark.parametrize("bad", [-1e-6, "0.1", None, True, float("nan")])
def test_present_but_invalid_cost_is_refused_with_the_entry_named(bad: object) -> None:
    data = {"my-model": {"input_cost_per_token": bad, "output_cost_per_token": 1e-6}}
    with pytest.raises(ConfigError, match="my-model"):
        parse_price_map(data)


def test_top_level_must_be_an_object() -> None:
    with pytest.raises(ConfigError, match="JSON object"):
        parse_price_map([{"gpt-4o": {}}])


def test_unreadable_and_malformed_files_are_config_errors(tmp_path: pathlib.Path) -> None:
    with pytest.raises(ConfigError, match="cannot be read"):
        load_price_map(str(tmp_path / "missing.json"))
    broken = tmp_path / "broken.json"
    broken.write_text("{not json", encoding="utf-8")
    with pytest.raises(ConfigError, match="not valid JSON"):
        load_price_map(str(broken))


def test_exact_name(price_map: dict[str, Price]) -> None:
    assert PriceBook(price_map).price_for("gpt-4o") == Price(2_500_000, 10_000_000)


def test_provider_prefix_is_stripped(price_map: dict[str, Price]) -> None:
    book = PriceBook(price_map)
    assert book.price_for("openai/gpt-4o-mini") == price_map["gpt-4o-mini"]


def test_provider_prefix_is_added(price_map: dict[str, Price]) -> None:
    book = PriceBook(price_map)
    assert book.price_for("llama3-8b-8192") == price_map["groq/llama3-8b-8192"]
    assert book.price_for("llama3-8b-8192", provider="anything") == price_map["groq/llama3-8b-8192"]


def test_conflicting_prefixed_entries_need_a_provider_hint(price_map: dict[str, Price]) -> None:
    book = PriceBook(price_map)
    assert book.price_for("mixtral-8x7b-32768") is None
    assert book.price_for("mixtral-8x7b-32768", provider="groq") == Price(240_000, 240_000)
    assert book.price_for("mixtral-8x7b-32768", provider="deepinfra") == Price(270_000, 270_000)


def test_unknown_model_is_none_never_zero(price_map: dict[str, Price]) -> None:
    book = PriceBook(price_map)
    assert book.price_for("no-such-model") is None
    assert book.price_for("vendor/no-such-model") is None
    assert PriceBook({}).price_for("gpt-4o") is None


def test_alias_price_wins_over_the_map(price_map: dict[str, Price]) -> None:
    negotiated = Price(100_000, 400_000)
    book = PriceBook(price_map, {"gpt-4o-mini": AliasEntry(upstream="gpt-4o-mini", price=negotiated)})
    assert book.price_for("gpt-4o-mini") == negotiated


def test_configured_zero_alias_price_is_a_known_zero(price_map: dict[str, Price]) -> None:
    book = PriceBook(price_map, {"local": AliasEntry(upstream="gpt-4o", price=Price(0, 0))})
    assert book.price_for("local") == Price(0, 0)


def test_unpriced_alias_is_priced_as_its_upstream_model(price_map: dict[str, Price]) -> None:
    book = PriceBook(
        price_map,
        {
            "fast": AliasEntry(upstream="openai/gpt-4o-mini"),
            "mix": AliasEntry(upstream="mixtral-8x7b-32768", provider="groq"),
            "mystery": AliasEntry(upstream="in-house-model"),
        },
    )
    assert book.price_for("fast") == price_map["gpt-4o-mini"]
    assert book.price_for("mix") == price_map["groq/mixtral-8x7b-32768"]
    assert book.price_for("mystery") is None
