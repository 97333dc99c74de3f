"""The sidecar's exceptions.

::

    SidecarError
     ├── ConfigError      operator input (config file, environment, price map) refused at start-up
     ├── StartupError     the process cannot start as configured (a listen address in use, ...)
     └── ApiError         an admin API request refused; carries a stable code and an HTTP status
          ├── BadRequest          400 invalid_request (``field`` names the first bad one)
          ├── UnsupportedEncoding 415 unsupported_content_encoding (a compressed admin body)
          ├── SpendUnbounded      422 spend_unbounded (a model of the trial has no list price)
          ├── InvalidSegments     422 invalid_segments (a trial's segments, segment_cap, segment_min_cases)
          ├── NotFound            404 not_found
          ├── Conflict            409 (request_key_conflict, trial_not_running, ...)
          │    └── PromotionRefused  409 promotion_refused, with a ``reason``
          ├── Unauthorized        401 unauthorized
          └── Forbidden           403 forbidden

Expected remote outcomes (429, 5xx, timeouts) are values, not exceptions; see
``sidecar.providers.base.ProviderResult``.
"""

from __future__ import annotations


class SidecarError(Exception):
    """Base of every exception the sidecar raises on purpose."""


class ConfigError(SidecarError):
    """Configuration could not be loaded; the message names the setting and never a secret."""


class StartupError(SidecarError):
    """``serve`` cannot start; the message is one line naming the setting and its value
    (``admin.listen 127.0.0.1:8791: cannot listen: Address already in use``)."""


class ApiError(SidecarError):
    """An admin API refusal. One middleware maps it to ``{"error": {code, message, field}}``."""

    status = 400
    code = "invalid_request"

    def __init__(self, message: str, *, field: str | None = None, code: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.field = field
        if code is not None:
            self.code = code


class BadRequest(ApiError):
    status = 400
    code = "invalid_request"


class UnsupportedEncoding(ApiError):
    status = 415
    code = "unsupported_content_encoding"


class SpendUnbounded(ApiError):
    status = 422
    code = "spend_unbounded"


class InvalidSegments(ApiError):
    status = 422
    code = "invalid_segments"


class NotFound(ApiError):
    status = 404
    code = "not_found"


class Conflict(ApiError):
    status = 409
    code = "conflict"


class PromotionRefused(Conflict):
    """A promotion the rules refuse (:func:`policies.promotion.refusal`): the error body adds ``reason``."""

    code = "promotion_refused"

    def __init__(self, message: str, *, reason: str, field: str | None = None) -> None:
        super().__init__(message, field=field)
        self.reason = reason


class Unauthorized(ApiError):
    status = 401
    code = "unauthorized"


class Forbidden(ApiError):
    status = 403
    code = "forbidden"
