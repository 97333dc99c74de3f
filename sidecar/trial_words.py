"""The words of the trials API a client names before any trial exists: the statuses a trial
can be in and the idempotency header. On their own, so the CLI builds its arguments without
importing the trial model, the store's records and the config (its start-up cost);
:mod:`sidecar.trials.create` and :mod:`sidecar.store.records` re-export them."""

from __future__ import annotations

from typing import Literal, get_args

TrialStatus = Literal[
    "running", "cap_reached", "stopped", "posture_changed", "starter_unauthorized", "adopted", "decided"
]
#: What ``GET /v1/trials?status=`` accepts.
STATUSES: tuple[str, ...] = get_args(TrialStatus)

IDEMPOTENCY_KEY = "Idempotency-Key"
MAX_KEY_CHARS = 255
