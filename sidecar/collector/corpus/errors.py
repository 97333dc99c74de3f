"""The corpus API's refusals: :class:`sidecar.errors.ApiError` subclasses, mapped to their
status by the admin API's error middleware (``{"error": {code, message, field}}``).

::

    ApiError (sidecar.errors)
     ├── InvalidDataset        400 invalid_dataset            an import or edit names its line and field
     ├── BodyTooLarge          413 body_too_large             an import past MAX_IMPORT_BYTES
     ├── Unprocessable         422 (the code given)           model_unresolved, spend_unbounded,
     │                                                        comparison_invocation_limit
     ├── InvalidSuite          422 suite_invalid              a metric or slice that cannot be used
     ├── VersionMismatch       422 grader_version_mismatch    a pinned version its definition is not
     ├── ComparisonInvalid     422 comparison_invalid         a group that cannot be planned
     │                             (comparison_primary_invalid: a primary metric the plan does not select)
     ├── SeedingUnavailable    409 dataset_seeding_unavailable  the team's prompt retention is off
     └── NotBuilt              501 not_implemented            seeding without retained-traffic storage

``Conflict`` (409: ``dataset_exists``, ``version_conflict``, ``stale_preflight``) and
``NotFound`` (404) are :mod:`sidecar.errors`' own; a reused request key with another body is
the store's ``IdempotencyConflict`` (409 ``request_key_conflict``).
"""

from __future__ import annotations

from sidecar.errors import ApiError


class InvalidDataset(ApiError):
    status = 400
    code = "invalid_dataset"


class BodyTooLarge(ApiError):
    status = 413
    code = "body_too_large"


class Unprocessable(ApiError):
    status = 422
    code = "unprocessable"


class InvalidSuite(ApiError):
    status = 422
    code = "suite_invalid"


class VersionMismatch(ApiError):
    status = 422
    code = "grader_version_mismatch"


#: Every ``comparison_invalid`` message begins so, then names the field (issue 24, item 5).
INVALID_PREFIX = "The evaluation comparison is invalid: "


class ComparisonInvalid(ApiError):
    """``comparison_invalid``: the message begins "The evaluation comparison is invalid: " and
    names the field after the colon (its path without ``$.``; ``body`` for the whole body),
    whichever module raises it."""

    status = 422
    code = "comparison_invalid"

    def __init__(self, message: str, *, field: str | None = None, code: str | None = None) -> None:
        if not message.startswith(INVALID_PREFIX):
            name = (field or "").removeprefix("$").removeprefix(".") or "body"
            message = INVALID_PREFIX + (message if message.startswith(name) else f"{name}: {message}")
        super().__init__(message, field=field, code=code)


class SeedingUnavailable(ApiError):
    status = 409
    code = "dataset_seeding_unavailable"


class NotBuilt(ApiError):
    status = 501
    code = "not_implemented"
