"""Services: what the admin API may do, on behalf of whom.

Every method takes the caller's :class:`policies.roles.Principal` first; the role
and team checks run here, through :mod:`sidecar.services.access`, and handlers
only decode requests and encode answers (issue 9, DESIGN.md section 13).
"""
