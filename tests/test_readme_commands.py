"""Every ``shadowtrial`` command the README and docs/ give works as written (issue 28, item 3).

A command in a shell block (``sh``) must parse with the real CLI parser exactly as written,
continuation lines joined and comments dropped; a command named in running text must name
subcommands that exist (``shadowtrial trials promote``), its options left to the shell
blocks. The README must also say where the command is after ``make demo``: ``.venv/bin/``.
"""

from __future__ import annotations

import argparse
import re
import shlex
from pathlib import Path

import pytest

from sidecar.cli.main import _parser

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
_BLOCK = re.compile(r"```(?:sh|bash|shell|console)\n(.*?)```", re.S)
_INLINE = re.compile(r"`(?:\.venv/bin/)?shadowtrial ([a-z][^`]*)`")


def block_commands(text: str) -> list[str]:
    out = []
    for block in _BLOCK.findall(text):
        for line in block.replace("\\\n", " ").splitlines():
            line = re.sub(r"\s+#.*$", "", line).strip()
            for prefix in ("shadowtrial ", ".venv/bin/shadowtrial "):
                if line.startswith(prefix):
                    out.append(line[len(prefix):])
    return out


def subcommand_path(parser: argparse.ArgumentParser, words: list[str]) -> list[str]:
    """The subcommands ``words`` walk through; an unknown one fails the test."""
    walked: list[str] = []
    for word in words:
        subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        if not subs or not re.fullmatch(r"[a-z][a-z-]*", word):
            break
        choices = subs[0].choices
        assert word in choices, f"`shadowtrial {' '.join([*walked, word])}`: no such subcommand ({', '.join(choices)})"
        walked.append(word)
        parser = choices[word]
    return walked


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_every_command_in_a_shell_block_parses_as_written(doc: Path) -> None:
    parser = _parser()
    for command in block_commands(doc.read_text(encoding="utf-8")):
        try:
            parser.parse_args(shlex.split(command))
        except SystemExit as exc:
            raise AssertionError(f"{doc.name}: `shadowtrial {command}` does not parse (exit {exc.code})") from None


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_every_command_named_in_the_text_exists(doc: Path) -> None:
    parser = _parser()
    text = doc.read_text(encoding="utf-8").replace("\n", " ")
    for m in _INLINE.finditer(text):
        words = m.group(1).replace("|", " ").split()
        assert subcommand_path(parser, words), f"{doc.name}: `shadowtrial {m.group(1)}` names no subcommand"


def test_the_readme_says_where_the_command_is() -> None:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "source .venv/bin/activate" in text and "`.venv/bin/shadowtrial`" in text
    assert text.index("source .venv/bin/activate") < text.index("## Running it for real")
    commands = block_commands(text)
    assert any(c.startswith("send --simulate --team search") for c in commands)
    assert any(c.startswith("send deploy/examples/exchanges.jsonl") for c in commands)
    assert (ROOT / "deploy" / "examples" / "exchanges.jsonl").is_file()
