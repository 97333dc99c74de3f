"""Crash semantics of comparison groups (issue 13, item 4): ``shadowtrial collector`` SIGKILLed
with an invocation in flight, then restarted. The attempt in flight becomes
``invocation_indeterminate`` (identity kept, cost unknown) and is never re-run on its own — the
fake provider counts every call — the rest of the group runs, the denominators add up, and an
explicit linked retry runs it once more."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

from sidecar.demo.fake_provider import FakeModel, FakeProvider
from tests.harness import CANDIDATE, INCUMBENT, JUDGE, wait_for
from tests.sidecar.collector.corpus.runs_kit import Api, collector_toml, group_body, planted_models, start_group

REPO = Path(__file__).resolve().parents[4]
ITEMS = 6


class CollectorProcess:
    """``shadowtrial collector`` as a child process; its log goes to a file."""

    def __init__(self, config: Path, log: Path) -> None:
        self.config, self.log = config, log
        self.proc: asyncio.subprocess.Process | None = None
        self.url = ""

    async def start(self) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("SHADOWTRIAL_")}
        with self.log.open("ab") as err:
            self.proc = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "sidecar.cli.main", "collector", "--config", str(self.config), cwd=REPO, env=env,
                stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE, stderr=err)
        assert self.proc.stdout is not None
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            line = await asyncio.wait_for(self.proc.stdout.readline(), timeout=deadline - time.monotonic())
            if not line:
                raise AssertionError(f"collector exited: {self.log.read_text()[-3000:]}")
            if line.startswith(b"shadowtrial collector:"):
                self.url = line.decode().split()[-1]
                return
        raise AssertionError("collector did not start")

    async def kill(self, sig: int) -> None:
        assert self.proc is not None
        self.proc.send_signal(sig)
        await asyncio.wait_for(self.proc.wait(), timeout=30)

    async def ensure_dead(self) -> None:
        if self.proc is not None and self.proc.returncode is None:
            self.proc.kill()
            await self.proc.wait()


async def test_sigkill_mid_experiment_leaves_the_call_in_flight_indeterminate_and_reruns_none(tmp_path: Path) -> None:
    # The candidate's first call answers; its second stalls (in flight at the kill); later ones answer.
    models = planted_models()
    models[CANDIDATE] = FakeModel(quality=0.8, quality_noise=0.02, filler_words=(2, 6), script=["ok", "timeout"])
    children: list[CollectorProcess] = []
    async with FakeProvider(models, seed=11) as fake:
        path, auth = collector_toml(tmp_path, fake.base_url, lease_seconds=1.0, workers=2)
        try:
            first = CollectorProcess(path, tmp_path / "collector-0.log")
            children.append(first)
            await first.start()
            api = Api(auth, first.url)
            suite = await api.suite(await api.dataset(ITEMS), [{"name": "pref", "kind": "paired_judge"},
                                                               {"name": "latency", "kind": "latency"}])
            started = await start_group(api, group_body(suite), "k-crash")
            assert started.status_code == 201, started.text
            gid = started.json()["id"]

            async def stalled() -> bool:
                # The candidate's second call stalls; the baseline's call of the same item has
                # answered and is recorded (3 completed), so only the stalled call is in flight.
                if fake.calls[CANDIDATE] < 2:
                    return False
                attempts = (await api.call("GET", f"/v1/comparisons/{gid}/attempts")).json()["attempts"]
                return sum(a["status"] == "completed" for a in attempts) >= 3

            await wait_for(stalled, what="the candidate's second call in flight, the baseline's recorded")
            await first.kill(signal.SIGKILL)
            await api.aclose()
            at_kill = {m: fake.calls[m] for m in (INCUMBENT, CANDIDATE)}

            second = CollectorProcess(path, tmp_path / "collector-1.log")
            children.append(second)
            await second.start()
            api = Api(auth, second.url)
            view: dict[str, Any] = {}

            async def ended() -> bool:
                view.update((await api.call("GET", f"/v1/comparisons/{gid}")).json())
                return bool(view["status"] == "completed")

            await wait_for(ended, what="the restarted collector to finish the group")
            before_retry = {a["arm"]: a["generation"] for a in view["run"]["arms"]}
            attempts = (await api.call("GET", f"/v1/comparisons/{gid}/attempts")).json()["attempts"]
            calls = {m: fake.calls[m] for m in (INCUMBENT, CANDIDATE)}
            lost = [a for a in attempts if a["status"] == "invocation_indeterminate"]
            assert len(lost) == 1 and lost[0]["arm"] == "next" and lost[0]["cost"]["coverage"] == "unknown"
            retried = await api.call("POST", f"/v1/comparisons/{gid}/retry", json={"attempt_id": lost[0]["id"]})
            again = await api.call("POST", f"/v1/comparisons/{gid}/retry", json={"attempt_id": lost[0]["id"]})
            assert retried.status_code == 201 and again.status_code == 200
            assert again.json()["id"] == retried.json()["id"] and retried.json()["retry_of"] == lost[0]["id"]

            async def rerun() -> bool:
                v = (await api.call("GET", f"/v1/comparisons/{gid}")).json()
                view.update(v)
                return bool(v["status"] == "completed" and v["run"]["arms"][1]["generation"]["completed"] == ITEMS)

            await wait_for(rerun, what="the linked retry run")
            completed_calls = fake.calls[CANDIDATE]
            await second.kill(signal.SIGTERM)
            await api.aclose()
        finally:
            for child in children:
                await child.ensure_dead()
    arms = {a["arm"]: a["generation"] for a in view["run"]["arms"]}
    print(f"\nSIGKILL mid-experiment: calls at the kill {at_kill}; after restart {calls} "
          f"(planned {ITEMS} per arm); indeterminate {lost[0]['item_id']} rep {lost[0]['repetition']} "
          f"attempt {lost[0]['attempt']}; denominators after restart {before_retry}; after the linked retry "
          f"{completed_calls} candidate calls, denominators {arms}")
    for g in before_retry.values():
        assert g["completed"] + g["failed"] + g["invocation_indeterminate"] + g["in_flight"] + g["queued"] \
            + g["not_started"] == g["planned"] == ITEMS
    assert before_retry["next"]["invocation_indeterminate"] == 1 and before_retry["next"]["completed"] == ITEMS - 1
    assert calls[INCUMBENT] == ITEMS and calls[CANDIDATE] == ITEMS, "nothing re-run: one call per planned invocation"
    assert completed_calls == ITEMS + 1, "the explicit retry is the only re-run"
    for g in arms.values():
        assert g["completed"] + g["failed"] + g["invocation_indeterminate"] + g["in_flight"] + g["queued"] \
            + g["not_started"] == g["planned"] == ITEMS
    assert fake.calls[JUDGE] >= ITEMS
