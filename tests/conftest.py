"""Session-wide test fixtures: one throwaway PostgreSQL server per test session.

Tests that need PostgreSQL take ``pg_server`` (a :class:`tests.pg.PostgresServer`)
and a fresh database from it. Without the server binaries they skip, naming the
package to install — unless ``SHADOWTRIAL_REQUIRE_POSTGRES=1`` (set by ``.ci/run``),
where a missing PostgreSQL fails them instead.

``make test`` runs the suite in pytest-xdist workers (``--dist loadgroup``). A session is
then one per worker: each worker starts its own PostgreSQL (own directory, own free port)
and its own Chromium. Fixtures that are costly to build and shared by many tests — a
module-scoped one, or a session-scoped one named in :data:`SHARED_FIXTURES` (three LiteLLM
proxies) — would be built once per worker that runs one of their tests; so every test that
takes one is put in one ``xdist_group`` (:func:`pytest_collection_modifyitems`), and the
fixture is built once, as in a run without workers.
"""

from __future__ import annotations

import os
import sys
from collections.abc import AsyncIterator, Iterator
from typing import Any

# One BLAS thread per test process (issue 29). The statistics tests solve many small linear
# systems (the CUSUM design's exact run lengths); a multi-threaded BLAS spins its idle threads
# between calls, and with xdist workers already sharing the cores that spinning cost the
# policies tests several times the CPU of the work itself. It takes effect where it is set before
# numpy loads: in every xdist worker and every process a test starts.
for _name in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_name, "1")

import pytest
import pytest_asyncio

from sidecar.engine import process as engine_start
from tests.engine_server import stop_engine_server
from tests.pg import INSTALL_HINT, PostgresServer, find_bindir, postgres_server
from tests.sidecar.demo.explore_kit import SharedDemo

# The suite starts hundreds of Python processes (sidecars, their engines' processes, collectors,
# CLI commands, the xdist workers): with PYTHONDONTWRITEBYTECODE set in the environment, each
# one compiled every module of ours from source again (about 0.2 s of CPU a sidecar start).
# Bytecode is written to __pycache__ (ignored by git), as Python does by default.
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
sys.dont_write_bytecode = False

# The engines' processes of the sidecars tests run in this process fork from one warm server
# that imported the engine once (issue 29: a spawned one spent about 0.75 s of CPU importing
# it, about 0.1 s forked). ``shadowtrial serve`` processes keep the default, ``spawn``.
engine_start.use_start_method("forkserver")


@pytest_asyncio.fixture(scope="session", loop_scope="session")
async def browser() -> AsyncIterator[Any]:
    """One headless Chromium per session (per xdist worker) for every test that drives one, the
    console's and the integrations' alike (tests/console/conftest.py says how it is launched)."""
    from tests.console.conftest import launched_browser

    async with launched_browser() as chromium:
        yield chromium


@pytest_asyncio.fixture(scope="session", loop_scope="session")
async def explorable_demo() -> AsyncIterator[SharedDemo]:
    """The explorable demo shared by its HTTP test and its browser test (one xdist group)."""
    demo = SharedDemo()
    try:
        yield demo
    finally:
        if demo.running is not None:
            code, _, err = await demo.stop()
            assert code == 0, err[-2000:]


@pytest.fixture(scope="session", autouse=True)
def _fork_server_reaped() -> Iterator[None]:
    """The session's end reaps the warm parent that ``serve`` children fork from
    (tests/sidecar/forkserve.py) and the server engines' processes fork from
    (tests/engine_server.py), if they were started: their CPU, and their children's, is
    counted with the last test's."""
    yield
    forkserve = sys.modules.get("tests.sidecar.forkserve")
    if forkserve is not None:
        forkserve.close_shared()
    stop_engine_server()


@pytest.fixture(scope="session")
def pg_server() -> Iterator[PostgresServer]:
    if find_bindir() is None:
        if os.environ.get("SHADOWTRIAL_REQUIRE_POSTGRES") == "1":
            pytest.fail(f"{INSTALL_HINT} (SHADOWTRIAL_REQUIRE_POSTGRES=1 requires it)")
        pytest.skip(INSTALL_HINT)
    with postgres_server() as server:
        yield server


#: Session-scoped fixtures too costly to build in every worker: fixture name -> xdist group.
SHARED_FIXTURES = {"gateway": "litellm-gateway", "explorable_demo": "explorable-demo"}

#: Tests of tens of seconds each (node id prefixes). In workers they are handed out first, so
#: that none starts last and runs alone while the other workers sit idle. A stale entry costs
#: nothing but order; a run without workers keeps the file order.
HEAVY = (
    "tests/bench/",
    "tests/fuzz/",
    "tests/sidecar/engine/test_spend.py::test_cap_holds_under_200_concurrent_cases",
    "tests/sidecar/services/test_replay.py::test_a_replay_over_2000",
    "tests/sidecar/services/test_watches.py::test_quality_held_steady_over_2000",
    "tests/policies/test_betting.py::test_null_trials",
    # The explorable demo's group (one demo for both): the browser's tour of it, then its HTTP test.
    "tests/console/test_console_demo_explore.py::", "tests/sidecar/demo/test_explore.py::test_the_explorable_demo",
)


@pytest.hookimpl(tryfirst=True)  # before xdist reads the groups (--dist loadgroup)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if hasattr(config, "workerinput"):  # an xdist worker: every worker sorts alike
        items.sort(key=lambda item: not item.nodeid.startswith(HEAVY))
    for item in items:
        info = getattr(item, "_fixtureinfo", None)
        if info is None:
            continue
        fixtures = info.name2fixturedefs
        group = next((SHARED_FIXTURES[name] for name in fixtures if name in SHARED_FIXTURES), None)
        if group is None and any(defs and defs[-1].scope == "module" for defs in fixtures.values()):
            group = f"module:{item.path.relative_to(config.rootpath)}"
        if group is not None:  # one group per test: two marks would make a third group of their own
            item.add_marker(pytest.mark.xdist_group(group))
