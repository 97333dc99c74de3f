"""uplink."""
