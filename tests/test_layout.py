"""Facts about the repository's layout that nothing else would catch."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("sidecar", "judge", "uplink", "policies", "tests")


def test_no_benchmark_shadows_a_package() -> None:
    """A benchmark runs as ``python bench/NAME.py``, which puts ``bench/`` first on
    ``sys.path``: a ``bench/uplink.py`` made ``import uplink`` find it instead of the
    package, and every benchmark starting a sidecar failed."""
    shadows = sorted(p.name for p in (ROOT / "bench").glob("*.py") if p.stem in PACKAGES)
    assert shadows == [], f"rename {shadows}: they shadow the packages of the same name"


def test_tests_mirror_the_packages() -> None:
    """The tests of ``sidecar/x/y.py`` live under ``tests/sidecar/x/``: every folder of
    ``tests/sidecar/`` names a package of ``sidecar/``."""
    tests = ROOT / "tests" / "sidecar"
    strays = sorted(
        str(d.relative_to(tests)) for d in tests.rglob("*")
        if d.is_dir() and d.name != "__pycache__" and not (ROOT / "sidecar" / d.relative_to(tests) / "__init__.py").exists()
    )
    assert strays == [], f"no package sidecar/{strays} to mirror"
