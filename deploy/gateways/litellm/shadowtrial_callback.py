"""LiteLLM loads callbacks from its config's directory: this shim names the plugin (docs/litellm.md)."""
from sidecar.integrations.litellm import proxy_handler_instance  # noqa: F401
