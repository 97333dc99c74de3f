"""Store errors.

    StoreError
    └── IdempotencyConflict   the key was used before with another body (409 request_key_conflict)
"""

from __future__ import annotations


class StoreError(Exception):
    pass


class IdempotencyConflict(StoreError):
    def __init__(self, key: str) -> None:
        super().__init__(f"Idempotency-Key {key!r} was used with a different request body")
        self.key = key
