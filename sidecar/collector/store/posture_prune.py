"""Old ``posture`` records are not kept (issue 25 item 5): a sidecar sends its teams' posture
whenever it changes and again every few heartbeats, and only the latest counts. So each
batch that brings posture records keeps, per (sidecar, team) it names, only the latest one
(highest revision, then the last stored: the order :meth:`latest_posture` reads them in),
in the batch's own transaction. A late copy of an older record is stored and pruned at once."""

from __future__ import annotations

from typing import Sequence

from uplink.collector_store import Held

#: Parameters ``$1`` sidecar id, ``$2`` team (PostgreSQL's; SQLite's replace them by position).
PRUNE_POSTURES = (
    "DELETE FROM collected_records WHERE kind = 'posture' AND sidecar_id = $1 AND team = $2 AND seq <> "
    "(SELECT seq FROM collected_records WHERE kind = 'posture' AND sidecar_id = $1 AND team = $2 "
    "ORDER BY revision DESC, seq DESC LIMIT 1)"
)
#: The same for SQLite's positional parameters: (sidecar id, team, sidecar id, team).
PRUNE_POSTURES_SQLITE = PRUNE_POSTURES.replace("$1", "?").replace("$2", "?")


def posture_keys(records: Sequence[Held]) -> list[tuple[str, str]]:
    """The (sidecar id, team) of the batch's ``posture`` records, each once."""
    return sorted({(h.sidecar_id, h.team) for h in records if h.kind == "posture" and h.team})
