"""``tap``: ``bench/tap.py`` loaded as a module, for tests of the benchmark's own logic."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Iterator

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"


@pytest.fixture(scope="module")
def tap() -> Iterator[ModuleType]:
    spec = importlib.util.spec_from_file_location("bench_tap_under_test", BENCH / "tap.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is built
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        del sys.modules[spec.name]
