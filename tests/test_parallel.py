"""``make test`` runs the suite in pytest-xdist workers (--dist loadgroup); the tests that take a
costly shared fixture must still share one worker (tests/conftest.py), or each worker builds its
own (three LiteLLM proxies each). Checked on a throwaway suite in a child pytest, with the
repository's grouping hook and a stand-in ``gateway`` fixture."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

CONFTEST = '''
import os
import pytest
from tests.conftest import pytest_collection_modifyitems  # noqa: F401  (the hook under test)

@pytest.fixture(scope="session")
def gateway():
    return os.environ["PYTEST_XDIST_WORKER"]

@pytest.fixture(scope="module")
def table():
    return os.environ["PYTEST_XDIST_WORKER"]
'''

TESTS = '''
import os
from pathlib import Path

def _seen(kind):
    with open(Path(__file__).parent / f"{kind}.log", "a") as f:
        f.write(os.environ["PYTEST_XDIST_WORKER"] + "\\n")

''' + "".join(f"def test_gateway_{i}(gateway):\n    _seen('gateway')\n\n" for i in range(6)) \
    + "".join(f"def test_table_{i}(table):\n    _seen('table')\n\n" for i in range(6)) \
    + "".join(f"def test_free_{i}():\n    _seen('free')\n\n" for i in range(6))


def test_tests_sharing_a_costly_fixture_run_in_one_worker(tmp_path: Path) -> None:
    (tmp_path / "conftest.py").write_text(CONFTEST)
    (tmp_path / "test_shared.py").write_text(TESTS)
    # Nor the outer run's switches, nor its own worker's identity when the suite runs in workers.
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SHADOWTRIAL_", "PYTEST_"))}
    env["PYTHONPATH"] = str(ROOT)
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "3", "--dist", "loadgroup",
         "--rootdir", str(tmp_path), str(tmp_path)],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=240,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    workers = {kind: (tmp_path / f"{kind}.log").read_text().split() for kind in ("gateway", "table", "free")}
    assert len(workers["gateway"]) == 6 and len(set(workers["gateway"])) == 1, workers
    assert len(workers["table"]) == 6 and len(set(workers["table"])) == 1, workers
    assert len(workers["free"]) == 6
