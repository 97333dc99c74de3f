"""Planted-gap and null comparison groups, run end to end (issue 24, "must show").

Each run starts a collector (SQLite store, JWT auth) in front of the fake provider, uploads a
dataset, defines a suite and starts a group over HTTP as a client would, waits for its end and
prints the primary metric's verdict, its interval and the run's spend, split into generation
and grading (judge calls; deterministic graders cost nothing).

Four runs, each a planted gap (the candidate's answers better) and a null (both arms alike):

- ``graded``: ITEMS x 2 repetitions with a deterministic grader (a regex passing answers whose
  hidden quality is at least 0.6) as the primary metric: no model invocation for grading;
- ``judged``: the largest paired-judge group admission takes at 2 repetitions. The admission
  limit (1,000 per arm) counts each model grader's five-attempt allowance, so the judged arm
  plans items x 2 x (1 + 5): 83 items (996) is admitted, 200 x 2 (2,400) is refused, and the
  limit is never raised automatically.

Run: ``python bench/corpus_runs.py`` (200 graded items, 83 judged); ``--quick`` runs 10 and 8.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from sidecar.demo.fake_provider import FakeModel, FakeProvider  # noqa: E402
from tests.harness import CANDIDATE, INCUMBENT, JUDGE  # noqa: E402
from tests.sidecar.collector.corpus.runs_kit import (  # noqa: E402
    Api,
    collector_toml,
    group_body,
    open_collector,
    start_group,
)

#: Passes an answer whose planted quality marker reads 0.6 or more.
GRADER = {"name": "good", "kind": "grader", "grader": {"type": "regex", "pattern": "⟨q=(0\\.[6-9]|1\\.)"}}
JUDGED = {"name": "pref", "kind": "paired_judge"}
#: Planted qualities (baseline, candidate): a gap, and none.
SCENARIOS = {"planted gap": (0.55, 0.65), "null": (0.6, 0.6)}


def models(baseline_q: float, candidate_q: float) -> dict[str, FakeModel]:
    return {INCUMBENT: FakeModel(quality=baseline_q, quality_noise=0.1, filler_words=(2, 6)),
            CANDIDATE: FakeModel(quality=candidate_q, quality_noise=0.1, filler_words=(2, 6)),
            JUDGE: FakeModel(judge=True)}


async def wait_done(api: Api, group_id: str, timeout: float) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        r = await api.call("GET", f"/v1/comparisons/{group_id}")
        body: dict[str, Any] = r.json()
        if body["status"] in ("completed", "cap_reached", "failed", "cancelled"):
            return body
        if time.monotonic() > deadline:
            raise TimeoutError(f"group {group_id} still {body['status']} after {timeout:.0f} s")
        await asyncio.sleep(0.2)  # a poll interval, not a synchronisation


async def one_run(tmp: Path, qualities: tuple[float, float], metric: dict[str, Any], items: int,
                  repetitions: int, seed: int) -> dict[str, Any]:
    async with FakeProvider(models(*qualities), seed=seed) as fake:
        path, auth = collector_toml(tmp, fake.base_url)
        server = await open_collector(path)
        api = Api(auth, server.url)
        try:
            suite = await api.suite(await api.dataset(items), [metric])
            started = await start_group(api, group_body(suite, repetitions=repetitions, primary=metric["name"]),
                                        f"bench-{metric['name']}-{items}")
            if started.status_code != 201:
                return {"refused": started.json()}
            t0 = time.monotonic()
            view = await wait_done(api, started.json()["id"], timeout=900.0)
            elapsed = time.monotonic() - t0
        finally:
            await api.aclose()
            await server.stop()
        judge_calls = fake.calls[JUDGE]
    run = view["run"]
    row = next(r for r in run["results"] if r["metric"] == metric["name"])
    generation = sum(a["generation_spend"]["known_micros"] for a in run["arms"])
    total = run["spend"]["known_micros"]
    return {"status": view["status"], "code": row["code"], "wording": row["wording"], "estimate": row["estimate"],
            "interval": row["interval"], "band": row["band"], "paired": row["paired_items"],
            "generation_micros": generation, "grading_micros": total - generation, "total_micros": total,
            "coverage": run["spend"]["coverage"], "judge_calls": judge_calls, "seconds": elapsed}


def fmt(x: float | None) -> str:
    return "-" if x is None else f"{x:+.3f}"


async def main(quick: bool) -> None:
    graded_items, judged_items = (10, 8) if quick else (200, 83)
    print("| run | metric | items x reps | verdict | estimate | 95% interval | band | generation µ$ | "
          "grading µ$ | total µ$ | judge calls |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as root:
        n = 0
        for metric, items in ((GRADER, graded_items), (JUDGED, judged_items)):
            for name, qualities in SCENARIOS.items():
                n += 1
                tmp = Path(root) / f"run{n}"
                tmp.mkdir()
                got = await one_run(tmp, qualities, metric, items, 2, seed=n)
                if "refused" in got:
                    print(f"| {name} | {metric['name']} | {items} x 2 | refused: {got['refused']} |")
                    continue
                iv = got["interval"]
                shown = "none" if iv is None else f"[{iv[0]:+.3f}, {iv[1]:+.3f}]"
                print(f"| {name} | {metric['name']} ({metric['kind']}) | {items} x 2 | {got['wording']} "
                      f"(`{got['code']}`) | {fmt(got['estimate'])} | {shown} | ±{got['band']:.2f} | "
                      f"{got['generation_micros']:,} | {got['grading_micros']:,} | {got['total_micros']:,} "
                      f"({got['coverage']}) | {got['judge_calls']} |", flush=True)
        # Admission: 200 x 2 with the paired judge is refused (five-attempt allowance per judgment).
        tmp = Path(root) / "refused"
        tmp.mkdir()
        got = await one_run(tmp, SCENARIOS["null"], JUDGED, 200, 2, seed=99)
        code = got.get("refused", {}).get("error", {}).get("code")
        print(f"\n200 items x 2 with the paired judge: {'refused, ' + str(code) if code else 'ADMITTED'}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small runs (the suite's smoke test)")
    asyncio.run(main(parser.parse_args().quick))
