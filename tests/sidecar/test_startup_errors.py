"""``shadowtrial serve`` as a real child process: a start-up failure is one clear line on
stderr naming the path or the address, with exit status 2 and no traceback (issue 8, item 8);
and its log at INFO carries no line per provider call (issue 8, item 10).

The sidecar here runs as operators run it: the engine in a process of its own (the default).
Each ``serve`` is a child process forked from a warm parent that imported the sidecar once
(:mod:`tests.sidecar.forkserve`; issue 29: the imports were nearly all of a failing start's
CPU); its exit status and its stdout and stderr are the child's own.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import sqlite3
from pathlib import Path

import pytest

from sidecar.demo.fake_provider import FakeProvider
from tests.harness import default_models, exchange, wait_for, write_config
from tests.sidecar.forkserve import create_subprocess
from tests.sidecar.test_lifecycle import Client, ServerProcess

#: Generous: the child imports the sidecar and, for the engine's failure, spawns the engine's process.
EXIT_TIMEOUT_S = 60.0


async def serve_fails(config: Path) -> tuple[int, list[str]]:
    """Run ``shadowtrial serve --config CONFIG``; it must exit by itself. (exit status, stderr lines)."""
    out_path, err_path = config.with_name("serve.out"), config.with_name("serve.err")
    with out_path.open("wb") as out_file, err_path.open("wb") as err_file:
        proc = await create_subprocess(["serve", "--config", str(config)], stdout=out_file.fileno(),
                                       stderr=err_file.fileno())
    try:
        rc = await asyncio.wait_for(proc.wait(), timeout=EXIT_TIMEOUT_S)
    except asyncio.TimeoutError:
        proc.kill()
        await proc.wait()
        raise AssertionError(f"serve did not exit; it printed {out_path.read_bytes()!r} {err_path.read_bytes()!r}") from None
    out = out_path.read_bytes()
    assert out == b"", out  # it never announced its addresses
    return rc, err_path.read_bytes().decode(errors="replace").splitlines()


def config_with(tmp_path: Path, *, db: str = "trials.db", extra: str = "") -> Path:
    # The provider is never called: each of these fails before any trial runs.
    return write_config(tmp_path, "http://127.0.0.1:9/v1", db=db, extra=extra, isolation="process")


def assert_one_line(rc: int, lines: list[str], *expected: str) -> None:
    assert rc == 2, (rc, lines)
    assert len(lines) == 1, "\n".join(lines)
    (line,) = lines
    assert line.startswith("shadowtrial: "), line
    assert "Traceback" not in line
    for part in expected:
        assert part in line, (part, line)


async def test_a_store_in_a_missing_directory(tmp_path: Path) -> None:
    path = tmp_path / "missing" / "trials.db"
    rc, lines = await serve_fails(config_with(tmp_path, db=str(path.relative_to(tmp_path))))
    assert_one_line(rc, lines, f"store.path '{path}'", f"directory '{path.parent}' does not exist")


async def test_a_store_path_that_is_a_directory(tmp_path: Path) -> None:
    (tmp_path / "adir").mkdir()
    rc, lines = await serve_fails(config_with(tmp_path, db="adir"))
    assert_one_line(rc, lines, f"store.path '{tmp_path / 'adir'}'", "it is a directory")


@pytest.mark.parametrize("path", ["/proc/shadowtrial.db", "/proc/self/status"], ids=["new-file", "existing-file"])
async def test_a_store_under_proc(tmp_path: Path, path: str) -> None:
    config = config_with(tmp_path)
    config.write_text(config.read_text().replace(str(tmp_path / "trials.db"), path))
    rc, lines = await serve_fails(config)
    assert_one_line(rc, lines, f"store.path '{path}'", "cannot open the SQLite store")


async def test_a_store_in_a_read_only_directory(tmp_path: Path) -> None:
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o555)
    try:
        if os.access(ro, os.W_OK):
            pytest.skip("this user writes into read-only directories (root): /proc stands in for one above")
        rc, lines = await serve_fails(config_with(tmp_path, db="ro/trials.db"))
        assert_one_line(rc, lines, f"store.path '{ro / 'trials.db'}'", f"directory '{ro}' is not writable")
    finally:
        ro.chmod(0o755)


async def test_a_missing_price_map(tmp_path: Path) -> None:
    missing = tmp_path / "model_prices_and_context_window.json"
    rc, lines = await serve_fails(config_with(tmp_path, extra=f'[prices]\nmap_file = "{missing}"\n'))
    assert_one_line(rc, lines, "prices.map_file", str(missing), "No such file or directory")


@pytest.mark.parametrize("listener", ["tap", "admin"])
async def test_a_port_in_use(tmp_path: Path, listener: str) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        config = config_with(tmp_path)
        text = config.read_text()
        table = f"[{listener}]\nlisten = \"127.0.0.1:0\""
        assert table in text
        config.write_text(text.replace(table, f"[{listener}]\nlisten = \"127.0.0.1:{port}\""))
        rc, lines = await serve_fails(config)
    assert_one_line(rc, lines, f"{listener}.listen 127.0.0.1:{port}", "Address already in use")


async def test_an_intake_journal_another_sidecar_holds(tmp_path: Path) -> None:
    from sidecar.ingest.journal import Journal

    holder = Journal(str(tmp_path / "trials.db.intake"))  # another sidecar, alive
    holder.open()
    try:
        rc, lines = await serve_fails(config_with(tmp_path))
    finally:
        holder.close(keep=None)
    assert_one_line(rc, lines, "store.journal_dir", "in use by another sidecar")


async def test_an_intake_journal_that_cannot_be_created(tmp_path: Path) -> None:
    (tmp_path / "trials.db.intake").write_text("a file where the directory should be")
    rc, lines = await serve_fails(config_with(tmp_path))
    assert_one_line(rc, lines, "store.journal_dir", "cannot open the intake journal")


def _store_of_another_version(path: Path) -> None:
    """A SQLite file claiming a schema version this sidecar lacks, with none of its tables: the
    sidecar's own process opens it (nothing to migrate), the engine's process then fails on it."""
    conn = sqlite3.connect(path)
    try:
        conn.execute("PRAGMA user_version=999")
        conn.commit()
    finally:
        conn.close()


async def test_an_engine_that_cannot_start_ends_in_one_line_naming_its_store(tmp_path: Path) -> None:
    db = tmp_path / "trials.db"
    _store_of_another_version(db)
    rc, lines = await serve_fails(config_with(tmp_path))
    assert rc == 2, lines
    # The sidecar's own report: the last line, once.
    assert lines[-1].startswith("shadowtrial: the engine process did not start: "), lines
    assert f"(store '{db}')" in lines[-1]
    assert sum(line.startswith("shadowtrial: ") for line in lines) == 1


async def test_an_engine_that_cannot_start_writes_nothing_but_that_line(tmp_path: Path) -> None:
    _store_of_another_version(tmp_path / "trials.db")
    rc, lines = await serve_fails(config_with(tmp_path))
    assert_one_line(rc, lines, "the engine process did not start")


# -- the log at INFO ---------------------------------------------------------------------------


async def test_info_logging_writes_no_line_per_provider_call(tmp_path: Path) -> None:
    fake = FakeProvider(default_models(), seed=3)
    await fake.start()
    log = tmp_path / "serve.log"
    server = ServerProcess(write_config(tmp_path, fake.base_url, isolation="process"), log)
    try:
        await server.start()
        client = Client(server)
        try:
            trial_id = await client.create_trial()
            await client.send([exchange(i) for i in range(5)])

            async def judged() -> bool:
                funnel = (await client.trial(trial_id))["funnel"]
                return bool(funnel["outcomes"]["judged"] + funnel["outcomes"]["judge_failed"] == 5)

            await wait_for(judged, timeout=30.0, what="5 cases judged")
        finally:
            await client.aclose()
        assert sum(fake.calls.values()) >= 10  # candidate and judge calls were made
        server.signal(signal.SIGTERM)
        assert await server.wait(timeout=30.0) == 0
    finally:
        await server.ensure_dead()
        await fake.stop()
    text = log.read_text()
    assert "shadowtrial: tap listening on" in text  # the sidecar's own INFO lines are kept
    assert "HTTP Request:" not in text, text
    assert "httpx" not in text, text
