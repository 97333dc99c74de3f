"""``[otlp]``: the tap's OTLP/HTTP traces receiver (``POST /v1/traces``, docs/integrations.md).

The team of a GenAI span is never read from what a gateway's caller can set, unless the
operator names such an attribute: it is the value of the resource attribute
``team_resource_attribute`` (the exporting process's own, e.g. ``OTEL_RESOURCE_ATTRIBUTES=
shadowtrial.team=search``), else the only team of a gateway JWT, else the span attribute
``team_span_attribute`` when the operator set one (e.g. a gateway that writes the
authenticated key's team there). A span with none of them is rejected (partial success)."""

from __future__ import annotations

import re

from sidecar.config.fields import Section

#: An attribute key as OpenTelemetry writes them (dotted lower-case words, some tools add others).
_ATTRIBUTE = re.compile(r"[A-Za-z0-9_.\-/:]{1,255}")


class OtlpConfig(Section, frozen=True):
    """``[otlp]``: where the team and the gateway name of an OTLP span come from."""

    #: A resource attribute whose value is the span's team (empty: none).
    team_resource_attribute: str = "shadowtrial.team"
    #: A span attribute whose value is the team: only when the operator knows the gateway
    #: writes it from the caller's credential (a caller can set most span attributes).
    team_span_attribute: str = ""
    #: The resource attribute naming the gateway (trials filtered by ``gateway`` match it).
    gateway_resource_attribute: str = "service.name"
    #: The gateway name when that attribute is absent.
    default_gateway: str = "otel"

    def _validate(self) -> None:
        for name in ("team_resource_attribute", "team_span_attribute", "gateway_resource_attribute"):
            value = getattr(self, name)
            if value and not _ATTRIBUTE.fullmatch(value):
                raise ValueError(f"{name} must be an attribute key (letters, digits, . _ - / :), got {value!r}")
