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
