"""Session-wide test fixtures: one throwaway PostgreSQL server per test session.

Tests that need PostgreSQL take ``pg_server`` (a :class:`tests.pg.PostgresServer`)
and a fresh database from it. Without the server binaries they skip, naming the
package to install — unless ``SHADOWTRIAL_REQUIRE_POSTGRES=1`` (set by ``.ci/run``),
where a missing PostgreSQL fails them instead.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from tests.pg import INSTALL_HINT, PostgresServer, find_bindir, postgres_server


@pytest.fixture(scope="session")
def pg_server() -> Iterator[PostgresServer]:
    if find_bindir() is None:
        if os.environ.get("SHADOWTRIAL_REQUIRE_POSTGRES") == "1":
            pytest.fail(f"{INSTALL_HINT} (SHADOWTRIAL_REQUIRE_POSTGRES=1 requires it)")
        pytest.skip(INSTALL_HINT)
    with postgres_server() as server:
        yield server
