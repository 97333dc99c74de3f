"""The control plane's wing (``shadowtrial collector``): receiving uplinked records, control-plane
execution, the collected records and corpus evidence with its console pages. No sidecar module imports it."""
