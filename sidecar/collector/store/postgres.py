"""The collector's store over one PostgreSQL database: the sidecar's
:class:`~sidecar.store.postgres.PostgresStore` (its control-plane engine runs trials on it) with
the wing's own tables, migrated after the sidecar's by
:func:`sidecar.collector.store.schema.migrate_postgres`."""

from __future__ import annotations

from sidecar.collector.store.collected_pg import PostgresCollected
from sidecar.collector.store.corpus_pg import PostgresCorpus
from sidecar.collector.store.corpus_runs_pg import PostgresCorpusRuns
from sidecar.collector.store.reports_pg import PostgresReports
from sidecar.collector.store.schema import migrate_postgres
from sidecar.collector.store.templates_pg import PostgresTemplates
from sidecar.store.postgres import PostgresStore


class CollectorPostgresStore(PostgresCorpus, PostgresCorpusRuns, PostgresTemplates, PostgresCollected, PostgresReports, PostgresStore):
    """The :class:`sidecar.collector.store.base.ControlPlaneStore` over one PostgreSQL database."""

    async def open(self) -> None:
        await super().open()
        try:
            async with self._open_pool().acquire() as conn:
                await migrate_postgres(conn)
        except BaseException:
            await self.close()
            raise
