"""A config for a sidecar whose models all sit on one local OpenAI-compatible server.

Used by ``shadowtrial demo``, the test harness and the benchmarks, so the three
cannot drift apart; the result goes through the real loader like any file.
"""

from __future__ import annotations

from typing import Mapping

#: (input, output) list prices in US dollars per million tokens, by model alias.
Prices = Mapping[str, tuple[float, float]]


def loopback_config(
    *,
    base_url: str,
    db: str,
    judge: str,
    prices: Prices,
    workers: int = 16,
    queue_size: int = 10_000,
    drain_seconds: float = 5.0,
    judge_max_tokens: int = 128,
    timeout_s: float = 5.0,
    deadline_s: float = 10.0,
    max_retries: int = 2,
    tap_extra: str = "",
    engine_extra: str = "",
    extra: str = "",
) -> str:
    """TOML text: tap and admin on loopback port 0, one ``local`` provider, priced aliases.

    ``tap_extra`` lines go into ``[tap]``, ``engine_extra`` into ``[engine]``; ``extra`` is
    appended (new tables only).
    """
    models = "".join(
        f'[models."{alias}"]\nprovider = "local"\ninput_price_per_mtok = {inp}\noutput_price_per_mtok = {out}\n'
        for alias, (inp, out) in prices.items()
    )
    return f"""
[tap]
listen = "127.0.0.1:0"
queue_size = {queue_size}
{tap_extra}
[admin]
listen = "127.0.0.1:0"
[store]
path = "{db}"
[engine]
workers = {workers}
drain_seconds = {drain_seconds}
{engine_extra}
[judge]
model = "{judge}"
max_tokens = {judge_max_tokens}
[providers.local]
kind = "openai"
base_url = "{base_url}"
timeout_s = {timeout_s}
deadline_s = {deadline_s}
max_retries = {max_retries}
{models}
{extra}
"""
