"""What starting a process of ours imports (issue 29, goal 5: the suite's time goes to
starting sidecars, engine processes and CLI commands).

Each check imports a process's entry module in a fresh interpreter and names the heavy
modules it must not have loaded: numpy (the statistics, imported where a trial is folded),
the OpenAPI document's builder (on the first ``GET /openapi.json``), the console, PyJWT and
cryptography (on the first token, or with a retention key), protobuf (on the first OTLP export), and for the CLI the HTTP client and the
trial model. A module a start-up does not need costs every
``shadowtrial`` command, every sidecar and every engine's process (a fresh interpreter that
imports the CLI as its main, then :mod:`sidecar.engine.child`) its import time.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

#: Never needed to start: the statistics, the OpenAPI builder, the console (and its templates).
HEAVY = ("numpy", "policies.verdict", "policies.stream", "policies.cusum", "sidecar.api.openapi",
         "sidecar.console", "jinja2")

CASES = {
    # `shadowtrial --version`, `shadowtrial trials list`: argparse and the admin API's words only.
    "cli": (("sidecar.cli.main",), HEAVY + ("httpx", "aiohttp", "asyncio", "sidecar.trials.create",
                                            "sidecar.store", "sidecar.config", "sidecar.collector.corpus.items")),
    # The engine's process: spawn imports the CLI as its main, then the engine's entry module.
    "engine process": (("sidecar.cli.main", "sidecar.engine.child"), HEAVY + ("sidecar.app", "sidecar.api", "jwt", "cryptography")),
    # `shadowtrial collector` (it serves a console: that one is imported).
    "collector": (("sidecar.cli.main", "sidecar.collector.server"),
                  ("numpy", "policies.bootstrap", "policies.verdict", "policies.stream", "policies.cusum",
                   "sidecar.api.openapi", "jwt", "cryptography", "google.protobuf")),
    # `shadowtrial serve` (PyJWT on the first token checked or signed; protobuf on the first OTLP export).
    "sidecar": (("sidecar.cli.main", "sidecar.app"), HEAVY + ("jwt", "cryptography", "google.protobuf")),
}


def loaded_after(modules: tuple[str, ...]) -> set[str]:
    code = ("import importlib, json, sys\n"
            f"for m in {list(modules)!r}: importlib.import_module(m)\n"
            "print(json.dumps(sorted(sys.modules)))")
    env = {k: v for k, v in os.environ.items() if not k.startswith("SHADOWTRIAL_")}
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True,
                         timeout=120, check=True)
    return set(json.loads(out.stdout))


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_process_starts_without_what_it_does_not_need(case: str) -> None:
    entry, forbidden = CASES[case]
    loaded = loaded_after(entry)
    assert set(entry) <= loaded
    found = sorted(f for f in forbidden if any(m == f or m.startswith(f + ".") for m in loaded))
    assert found == [], f"importing {' then '.join(entry)} loads {found}"
