"""Alert delivery: the signed webhook of alert transitions (docs/alerts.md)."""
