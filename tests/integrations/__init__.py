"""Tests of the gateway integrations (sidecar/integrations/)."""
