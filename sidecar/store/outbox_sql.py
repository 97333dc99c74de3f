"""The outbox's statements, once for both dialects (:mod:`sidecar.store.dialect`).

A record goes in unless its id is there already; the uplink claims a batch under a lease
(in PostgreSQL the pick skips rows another sidecar is leasing this instant, and the lease
keeps them its own after that commit) and deletes what the collector acknowledged.
"""

from __future__ import annotations

ENQUEUE = (
    "INSERT INTO outbox (record_id, topic, body, created_at) VALUES (?, ?, ?, ?) ON CONFLICT (record_id) DO NOTHING"
)
LIST = "SELECT record_id, topic, body FROM outbox ORDER BY seq LIMIT ?"
#: owner, now + lease, owner, now, limit: pick and lease in one statement.
CLAIM = (
    "UPDATE outbox SET claimed_by = ?, lease_until = ? WHERE seq IN ("
    "SELECT seq FROM outbox WHERE claimed_by IS NULL OR claimed_by = ? OR lease_until < ? "
    "ORDER BY seq LIMIT ? {SKIP_LOCKED}) RETURNING seq, record_id, body"
)
DELETE = "DELETE FROM outbox WHERE record_id IN ?[]"
DEPTH = "SELECT COUNT(*) FROM outbox"
