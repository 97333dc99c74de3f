"""LiteLLM loads this file from its config file's directory (``callbacks:
shadowtrial_callback.proxy_handler_instance``). The plugin itself ships in the
shadowtrial package, which the gateway container must be able to import
(deploy/README.md: "The plugin in the gateway")."""
from sidecar.integrations.litellm import proxy_handler_instance  # noqa: F401
