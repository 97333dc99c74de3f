"""``[agents.NAME]`` (issue 24, item 3): an OpenAI-compatible endpoint with its own price or an
explicit unknown cost, whose ceiling is only meaningful when the cost is unknown."""

from __future__ import annotations

import pathlib

import pytest

from policies.money import Price
from sidecar.config import load_config
from sidecar.errors import ConfigError

ENDPOINTS = """
[providers.bots]
kind = "openai"
base_url = "http://127.0.0.1:9/v1"
[providers.claude]
kind = "anthropic"
base_url = "https://api.anthropic.com"
"""


def test_an_agent_has_its_own_price_or_an_explicit_unknown_cost(tmp_path: pathlib.Path) -> None:
    config = load_config(str(_write(tmp_path, """
[agents.priced]
provider = "bots"
input_price_per_mtok = 1.0
output_price_per_mtok = 2.0
[agents.open]
provider = "bots"
unknown_cost = true
max_cost_per_call_usd = 0.05
[agents.open.versions]
"7" = "open-v7"
""")), {})
    assert config.agents["priced"].price == Price(1_000_000, 2_000_000)
    assert config.agents["open"].price is None and config.agents["open"].ceiling_micros == 50_000
    assert config.agents["open"].versions == {"7": "open-v7"}


@pytest.mark.parametrize("text, words", [
    ('provider = "bots"\n', "exactly one of them"),  # neither a price nor unknown_cost
    ('provider = "bots"\nunknown_cost = true\ninput_price_per_mtok = 1.0\noutput_price_per_mtok = 1.0\n',
     "exactly one of them"),
    ('provider = "bots"\ninput_price_per_mtok = 1.0\noutput_price_per_mtok = 1.0\nmax_cost_per_call_usd = 1.0\n',
     "unknown_cost = true"),
    ('provider = "claude"\nunknown_cost = true\n', 'kind "openai"'),
    ('provider = "nowhere"\nunknown_cost = true\n', 'kind "openai"'),
])
def test_an_agent_that_cannot_be_called_or_priced_is_refused_at_start(tmp_path: pathlib.Path, text: str,
                                                                      words: str) -> None:
    with pytest.raises(ConfigError) as refused:
        load_config(str(_write(tmp_path, "[agents.bot]\n" + text)), {})
    assert words in str(refused.value)


def _write(tmp_path: pathlib.Path, text: str) -> pathlib.Path:
    path = tmp_path / "c.toml"
    path.write_text(ENDPOINTS + text)
    return path
