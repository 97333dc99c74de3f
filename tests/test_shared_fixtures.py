"""A costly session fixture (:data:`tests.conftest.SHARED_FIXTURES`: three LiteLLM proxies) is
built once per session only if it is defined once. pytest keeps a fixture a test module imports
as that module's own: two modules importing ``gateway`` were two session fixtures, and a run
started six proxies, each importing LiteLLM (seconds of CPU). It is defined in a conftest
(``tests/integrations/conftest.py``); no test module may import it."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.conftest import SHARED_FIXTURES

TESTS = Path(__file__).resolve().parent


def imported_shared_fixtures(source: str) -> list[str]:
    """The names of :data:`SHARED_FIXTURES` a module's source imports (at any depth)."""
    return sorted(
        alias.asname or alias.name
        for node in ast.walk(ast.parse(source)) if isinstance(node, ast.ImportFrom)
        for alias in node.names if alias.name in SHARED_FIXTURES
    )


def test_no_test_module_imports_a_shared_session_fixture() -> None:
    offenders = {
        str(path.relative_to(TESTS)): names
        for path in sorted(TESTS.rglob("test_*.py"))
        if (names := imported_shared_fixtures(path.read_text()))
    }
    assert offenders == {}, f"define these in a conftest instead of importing them: {offenders}"


def test_the_check_sees_an_import() -> None:
    assert imported_shared_fixtures("from tests.litellm_proxy import Gateway, gateway  # noqa\n") == ["gateway"]
    assert imported_shared_fixtures("from tests.litellm_proxy import Gateway\n") == []


def test_the_gateway_is_defined_in_a_conftest() -> None:
    conftest = (TESTS / "integrations" / "conftest.py").read_text()
    assert imported_shared_fixtures(conftest) == ["gateway"]
