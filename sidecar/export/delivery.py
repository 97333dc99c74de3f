"""The uplink's delivery loop, composed from ``[uplink]`` and the sidecar's store.

The owner of claimed outbox records is the configured ``sidecar_id``, stable
across restarts: a sidecar that restarts takes back at once what it had
claimed, and each sidecar of a fleet must have its own id.
"""

from __future__ import annotations

from typing import Awaitable, Callable

from sidecar.config import UplinkConfig
from sidecar.store.base import Store
from uplink.delivery import Delivery, DeliverySettings
from uplink.schema import Ack
from uplink.signing import Signer, load_private_key


def open_delivery(cfg: UplinkConfig, store: Store, *,
                  on_answer: Callable[[Ack], Awaitable[None]] | None = None) -> Delivery:
    """A :class:`Delivery` over ``store``'s outbox, ``on_answer`` given each answer
    (:class:`sidecar.export.answers.ControlPlaneAnswers`); raises ``ValueError`` for an unusable key."""
    signer = Signer(load_private_key(cfg.private_key_file), kid=cfg.key_id, issuer=cfg.issuer,
                    audience=cfg.audience, ttl_s=cfg.token_ttl_seconds)
    settings = DeliverySettings(
        url=cfg.collector_url, sidecar_id=cfg.sidecar_id, owner=cfg.sidecar_id, batch_size=cfg.batch_size,
        lease_s=cfg.lease_seconds, timeout_s=cfg.timeout_seconds, backoff_base_s=cfg.backoff_base_seconds,
        backoff_cap_s=cfg.backoff_cap_seconds, idle_poll_s=cfg.idle_poll_seconds,
    )
    return Delivery(store, settings, signer, on_answer=on_answer)
