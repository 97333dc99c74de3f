"""The collector's store over one SQLite file: the sidecar's :class:`~sidecar.store.sqlite.SQLiteStore`
(its control-plane engine runs trials on it) with the wing's own tables, migrated after the
sidecar's by :func:`sidecar.collector.store.schema.migrate_sqlite`."""

from __future__ import annotations

from sidecar.collector.store.collected_sqlite import SQLiteCollected
from sidecar.collector.store.corpus_runs_sqlite import SQLiteCorpusRuns
from sidecar.collector.store.corpus_sqlite import SQLiteCorpus
from sidecar.collector.store.reports_sqlite import SQLiteReports
from sidecar.collector.store.schema import migrate_sqlite
from sidecar.collector.store.templates_sqlite import SQLiteTemplates
from sidecar.store.sqlite import SQLiteStore


class CollectorSQLiteStore(SQLiteCorpus, SQLiteCorpusRuns, SQLiteTemplates, SQLiteCollected, SQLiteReports, SQLiteStore):
    """The :class:`sidecar.collector.store.base.ControlPlaneStore` over one SQLite file (WAL mode)."""

    async def open(self) -> None:
        await super().open()
        try:
            await self._run(migrate_sqlite)
        except BaseException:
            await self.close()
            raise
