"""``shadowtrial collector``: a config it cannot use is refused in one line, exit 2."""

from __future__ import annotations

from pathlib import Path

import pytest

from sidecar.cli import main


def test_an_unreadable_key_is_refused_at_start(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = tmp_path / "c.toml"
    cfg.write_text(f'[collector]\nlisten = "127.0.0.1:0"\ndb_path = "{tmp_path / "c.db"}"\naudience = "a"\n'
                   f'issuers = ["i"]\n[[collector.keys]]\nkid = "k"\npath = "{tmp_path / "missing.pub"}"\n')
    assert main(["collector", "--config", str(cfg)], {}) == 2
    assert "collector.keys" in capsys.readouterr().err


def test_an_unknown_collector_setting_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = tmp_path / "c.toml"
    cfg.write_text('[collector]\nlisen = "127.0.0.1:0"\n')
    assert main(["collector", "--config", str(cfg)], {}) == 2
    assert "lisen" in capsys.readouterr().err
