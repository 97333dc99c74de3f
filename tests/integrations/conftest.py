"""The session's LiteLLM gateway (``tests/litellm_proxy.py``), defined once for every module here.

A session fixture imported into two test modules is two fixtures to pytest, each built once:
with ``gateway`` imported by ``test_litellm_proxy.py`` and ``test_litellm_segments.py`` a run
started six proxies instead of three. Defined in this conftest, it is one."""

from tests.litellm_proxy import gateway, litellm_venv

__all__ = ["gateway", "litellm_venv"]
