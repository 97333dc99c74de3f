"""``shadowtrial demo --stay`` (sidecar/demo/explore.py, issue 28 item 2): one command, no key,
no network, and both consoles hold something to explore — checked over HTTP with the token
it prints, then stopped with a Ctrl-C to its process group, cleanly. The demo is shared with the
browser's tour of it (tests/console/test_console_demo_explore.py) through the ``explorable_demo``
fixture; this test stops it."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from sidecar.demo.explore import CANDIDATE, INCUMBENT, TEAM
from tests.sidecar.demo.explore_kit import SharedDemo


@pytest.mark.asyncio(loop_scope="session")  # the shared demo's process belongs to the session's loop
async def test_the_explorable_demo_populates_every_state_and_stops_on_ctrl_c(explorable_demo: SharedDemo) -> None:
    demo = await explorable_demo.get()
    try:
        print(f"\nexplorable demo ready in {demo.ready_s:.1f}s")
        auth = {"Authorization": f"Bearer {demo.token}"}
        async with httpx.AsyncClient(base_url=demo.sidecar, headers=auth, timeout=30) as sc, \
                httpx.AsyncClient(base_url=demo.collector, headers=auth, timeout=30) as cp:
            trials = {t["id"]: t for t in (await sc.get("/v1/trials")).json()["trials"]}
            states = {(t["status"], t["verdict"]["wording"], t["on_decision"]) for t in trials.values()}
            assert ("decided", "Adoptable", "stop") in states, states       # decided and stopped
            assert ("running", "Adoptable", "continue") in states, states   # decided, kept running
            assert ("decided", "Rejected", "stop") in states, states
            assert any(s[:2] == ("adopted", "Adopted") for s in states), states
            assert any(s[:2] == ("running", "Collecting") for s in states), states
            assert any(s[1] == "Paused" for s in states), states
            # The banner's links name those trials.
            assert trials[demo.id_of("Adoptable, stopped")]["status"] == "decided"
            assert trials[demo.id_of("Rejected")]["verdict"]["wording"] == "Rejected"
            assert trials[demo.id_of("Paused")]["verdict"]["wording"] == "Paused"
            collecting = trials[demo.id_of("Collecting, judged at the control plane")]
            local = trials[demo.id_of("Collecting, judged by the sidecar")]
            assert (local["status"], local["verdict"]["wording"], local["team"]) == ("running", "Collecting", TEAM)
            assert local["verdict"]["cases"] > 0

            # The promoted trial's watch fired: its alert is firing.
            watch_id = demo.id_of("Adopted, its watch")
            watch = (await sc.get(f"/v1/watches/{watch_id}")).json()
            assert watch["detector"]["fired"] and trials[watch["trial_id"]]["status"] == "adopted"
            alerts = (await sc.get("/v1/alerts")).json()["alerts"]
            assert [a["status"] for a in alerts if a["watch_id"] == watch_id] == ["firing"]

            # The control plane: every trial reported, the Collecting one judged there (posture), a
            # dataset and a completed experiment over it.
            at_cp = {t["trial_id"]: t for t in (await cp.get("/v1/trials")).json()["trials"]}
            assert set(trials) <= set(at_cp)
            assert collecting["team"] == "demo-support"
            assert (at_cp[collecting["id"]].get("control_plane") or {}).get("status") == "running"
            datasets = (await cp.get("/v1/datasets", params={"team": TEAM})).json()
            assert [d["name"] for d in _items(datasets, "datasets")] == ["support-questions"]
            experiment = (await cp.get(f"/v1/comparisons/{demo.id_of('Experiment')}")).json()
            assert json.dumps(experiment).count('"completed"') >= 1, experiment

            # The token carries the content permission: Compare answers instead of refusing.
            body = {"team": TEAM, "models": [INCUMBENT, CANDIDATE],
                    "messages": [{"role": "user", "content": "Name three primes."}]}
            async with sc.stream("POST", "/v1/compare", json=body) as r:
                text = (await r.aread()).decode()
            assert r.status_code == 200, text
            assert "event: answer" in text
    finally:
        code, out, err = await explorable_demo.stop()
    assert code == 0, err[-2000:]
    assert "the demo stopped." in out
    assert "Traceback" not in err, err[-3000:]


def _items(body: Any, key: str) -> list[dict[str, Any]]:
    return list(body[key] if isinstance(body, dict) else body)


def test_on_a_terminal_the_demo_stays_and_a_ctrl_c_while_it_populates_stops_it_cleanly() -> None:
    """``shadowtrial demo`` with a terminal for stdout takes the explorable path without a flag;
    a Ctrl-C to the whole process group (what the terminal sends) before it is ready ends it, exit 0,
    no traceback from it or from the sidecar's engine process."""
    import os
    import pty
    import select
    import signal
    import subprocess
    import sys
    import time

    from tests.sidecar.demo.explore_kit import ROOT, _env

    master, slave = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-m", "sidecar.cli.main", "demo"], cwd=ROOT, env=_env(),
                            stdin=subprocess.DEVNULL, stdout=slave, stderr=slave, start_new_session=True)
    os.close(slave)
    seen = b""

    def read_until(text: bytes, timeout: float) -> None:
        nonlocal seen
        deadline = time.monotonic() + timeout
        while text not in seen:
            left = deadline - time.monotonic()
            assert left > 0, f"timed out waiting for {text!r}: {seen.decode(errors='replace')[-2000:]}"
            ready, _, _ = select.select([master], [], [], left)
            if ready:
                try:
                    chunk = os.read(master, 65536)
                except OSError:  # the other side closed: the process ended
                    chunk = b""
                assert chunk, f"the demo ended before {text!r}: {seen.decode(errors='replace')[-2000:]}"
                seen += chunk

    try:
        read_until(b"Populating both consoles", 120)
        os.killpg(proc.pid, signal.SIGINT)
        read_until(b"the demo stopped.", 120)
        assert proc.wait(timeout=60) == 0, seen.decode(errors="replace")[-2000:]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        os.close(master)
    assert b"Traceback" not in seen and b"KeyboardInterrupt" not in seen, seen.decode(errors="replace")[-3000:]
    assert b"Starting a control-plane collector" in seen
