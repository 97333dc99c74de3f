"""A 400 says what is wrong in the product's words, through the API and the CLI alike (issue 28,
item 5): "must be at most 1.0", not msgspec's "Expected `float` <= 1.0"; the field path stays."""

from __future__ import annotations

from pathlib import Path

import pytest

from sidecar.trials.create import NAME_RULE
from tests.harness import CANDIDATE, INCUMBENT, Harness
from tests.sidecar.cli.test_cli import cli, create_args, env_for


async def test_the_api_and_the_cli_say_validation_errors_in_product_words(tmp_path: Path) -> None:
    base = {"team": "team-a", "incumbent_model": INCUMBENT, "candidate_model": CANDIDATE, "spend_cap_usd": 1.0}
    cases = [
        ({**base, "sample_rate": 1.5}, "must be at most 1.0", "$.sample_rate"),
        ({**base, "spend_cap_usd": "ten"}, "must be a number, got a string", "$.spend_cap_usd"),
        ({**base, "min_cases": 2.5}, "must be an integer, got a number", "$.min_cases"),
        ({**base, "on_decision": "pause"}, "'pause' is not one of the accepted values", "$.on_decision"),
        ({k: v for k, v in base.items() if k != "team"}, "team is required", "$.team"),
        ({**base, "team": " team-a"}, f"must be {NAME_RULE}", "$.team"),
        ({**base, "candidate_price": {"input_per_mtok_usd": 1}}, "output_per_mtok_usd is required",
         "$.candidate_price.output_per_mtok_usd"),
    ]
    async with Harness(tmp_path) as h:
        assert h.admin is not None
        for body, message, field in cases:
            r = await h.admin.post("/v1/trials", json=body)
            assert r.status_code == 400, r.text
            assert r.json() == {"error": {"code": "invalid_request", "message": message, "field": field}}
        r = await h.admin.post("/v1/compare", json={"team": "team-a", "models": [CANDIDATE],
                                                   "messages": [{"role": "user", "content": "hi"}]})
        assert r.status_code == 400
        assert r.json()["error"] == {"code": "invalid_request", "message": "must list at least 2 models",
                                     "field": "$.models"}
        # The CLI shows the API's words as they are, with the field.
        for argv, said in [
            (create_args("--sample-rate", "1.5"), "400 invalid_request: must be at most 1.0 (field $.sample_rate)"),
            (["compare", "--team", "team-a", "-m", CANDIDATE, "--prompt", "hi"],
             "400 invalid_request: must list at least 2 models (field $.models)"),
        ]:
            with pytest.raises(SystemExit) as info:
                await cli(argv, env_for(h))
            assert info.value.code == f"shadowtrial: {said}"
