"""The control-plane wing's store: the sidecar's store and the collector's own tables."""
