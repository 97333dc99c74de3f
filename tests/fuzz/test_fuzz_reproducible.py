"""The fuzz tests' examples depend on their seed alone, not on the modules the process imported
before them (tests/fuzz/hostile.py, :func:`without_source_constants`): under xdist a worker's
imports depend on which tests it ran first, and the fuzzes assert totals of their examples."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import pytest

from tests.fuzz import test_admin_fuzz, test_tap_fuzz


@pytest.fixture
def new_local_module(tmp_path: Path) -> object:
    """Import a module of our own that no test imported before, full of literals hypothesis could draw."""
    name = f"fuzz_literals_{tmp_path.name.replace('-', '_')}"
    literals = ", ".join([*(str(n) for n in range(-50, 5000, 7)), *(f'"lit-{n}"' for n in range(300))])
    (tmp_path / f"{name}.py").write_text(f"LITERALS = [{literals}, 0.25, 1.5, 2.75]\n")
    sys.path.insert(0, str(tmp_path))
    try:
        yield importlib.import_module(name)
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop(name, None)


def test_fuzz_examples_do_not_depend_on_imported_modules(request: pytest.FixtureRequest) -> None:
    tap_before = [r.build(0) for r in test_tap_fuzz.generate(8, 0)]
    admin_before = test_admin_fuzz.generate(20)
    request.getfixturevalue("new_local_module")
    assert [r.build(0) for r in test_tap_fuzz.generate(8, 0)] == tap_before
    assert test_admin_fuzz.generate(20) == admin_before
