"""Store fixtures: every conformance test runs once per backend.

``backend`` names a fresh database — a SQLite file in ``tmp_path``, or a new
PostgreSQL database on the session's server. ``stores()`` opens another store
instance on it (a peer: another process of the fleet, as far as the database
can tell); all are closed at the end of the test, on the test's own loop. A test marked
``collector_store`` opens the collector's store instead (the sidecar's store and the
control-plane wing's tables: :func:`sidecar.collector.store.make_collector_store`).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from sidecar.collector.store import make_collector_store
from sidecar.store import Store, make_store
from tests.pg import PostgresServer

OpenStore = Callable[[], Awaitable[Store]]


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "collector_store: the test's stores are the collector's (make_collector_store)")


@dataclass(frozen=True)
class Backend:
    kind: str  # "sqlite" | "postgres"
    url: str


@pytest.fixture(params=["sqlite", "postgres"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    if request.param == "sqlite":
        yield Backend("sqlite", str(tmp_path / "store.db"))
        return
    server: PostgresServer = request.getfixturevalue("pg_server")
    dsn = server.create_database()
    yield Backend("postgres", dsn)
    server.drop_database(dsn)


@pytest.fixture
async def stores(request: pytest.FixtureRequest, backend: Backend) -> AsyncIterator[OpenStore]:
    opened: list[Store] = []
    make = make_collector_store if request.node.get_closest_marker("collector_store") else make_store

    async def open_store() -> Store:
        store = make(backend.url)
        await store.open()
        opened.append(store)
        return store

    yield open_store
    for store in opened:
        await store.close()


@pytest.fixture
async def store(stores: OpenStore) -> Store:
    return await stores()


@pytest.fixture
async def peer(stores: OpenStore) -> Store:
    """A second instance on the same database: another process of the fleet."""
    return await stores()
