"""Admin authentication: bearer JWTs checked against keys pinned in config.

``keys``: the key set (PEM files, a JWKS file), each key with its accepted algorithms,
reloaded when a file changes or on :meth:`~sidecar.auth.keys.KeySet.reload`.
``verify``: a header value to a :class:`policies.roles.Principal`, or
:class:`~sidecar.auth.errors.Unauthorized`. ``mint``: development tokens and key pairs.
"""
