"""``[uplink]`` is validated when the config is read; a key that cannot sign stops the start."""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest

from sidecar.auth.mint import generate_key_pair
from sidecar.config import Config, load_config
from sidecar.errors import ConfigError
from sidecar.store import make_store
from sidecar.export.delivery import open_delivery


def _load(tmp: Path, text: str) -> Config:
    path = tmp / "c.toml"
    path.write_text(text)
    return load_config(str(path), {})


def test_off_by_default_and_every_identity_setting_required_when_on(tmp_path: Path) -> None:
    assert not load_config(None, {}).uplink.enabled
    with pytest.raises(ConfigError, match="key_id is required"):
        _load(tmp_path, '[uplink]\ncollector_url = "http://c:1"\nsidecar_id = "s"\nprivate_key_file = "k"\n'
                        'audience = "a"\nissuer = "i"\n')
    with pytest.raises(ConfigError, match="token_ttl_seconds"):
        _load(tmp_path, "[uplink]\ntoken_ttl_seconds = 600\n")
    with pytest.raises(ConfigError, match="lease_seconds"):
        _load(tmp_path, '[uplink]\ncollector_url = "http://c:1"\nsidecar_id = "s"\nprivate_key_file = "k"\n'
                        'key_id = "k"\naudience = "a"\nissuer = "i"\ntimeout_seconds = 30\nlease_seconds = 10\n')


def test_the_control_plane_console_url_is_an_http_url_and_needs_no_uplink(tmp_path: Path) -> None:
    assert load_config(None, {}).uplink.console_url == ""
    assert _load(tmp_path, '[uplink]\nconsole_url = "https://cp.example/console/"\n').uplink.console_url == \
        "https://cp.example/console/"
    with pytest.raises(ConfigError, match="console_url must be an http"):
        _load(tmp_path, '[uplink]\nconsole_url = "javascript:alert(1)"\n')


def test_a_key_that_is_not_ed25519_is_refused(tmp_path: Path) -> None:
    ec_key, _ = generate_key_pair(tmp_path, kind="ec", name="ec")
    cfg = msgspec.structs.replace(load_config(None, {}).uplink, collector_url="http://127.0.0.1:1", sidecar_id="s",
                                  private_key_file=str(ec_key), key_id="k", audience="a", issuer="i")
    with pytest.raises(ValueError, match="not an Ed25519 key"):
        open_delivery(cfg, make_store(str(tmp_path / "s.db")))
