"""The sidecar's side of the uplink: the control-plane sink, case results, trial states, delivery."""
