"""A trial's records: creating one, its control-plane spec, folding its evidence, a watch's day rows."""
