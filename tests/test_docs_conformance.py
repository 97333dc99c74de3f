"""The conformance table of ``docs/experiments.md`` names only tests that exist (issue 24).

Each row of its *Conformance* section cites ``path::test`` under ``tests/``, or says "not built"
or "no test". A renamed or removed test leaves the table citing nothing; this catches it (the
table once cited ``test_must_show_200_items_two_arms_three_repetitions`` after its rename).
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CITED = re.compile(r"`([\w/]+\.py)::(\w+)`")


def _rows() -> list[str]:
    text = (ROOT / "docs" / "experiments.md").read_text(encoding="utf-8")
    section = text[text.index("\n## Conformance"):]
    end = section.find("\n## ", 1)
    section = section if end < 0 else section[:end]
    return [line for line in section.splitlines() if re.match(r"\| [AG]\d+ \|", line)]


def test_every_specification_row_cites_an_existing_test_or_says_why_not() -> None:
    rows = _rows()
    assert len(rows) >= 30, "the table lost its rows"
    missing: list[str] = []
    for row in rows:
        cited = CITED.findall(row)
        if not cited:
            assert "not built" in row or "no test" in row, f"a row with no test and no reason: {row}"
        for path, name in cited:
            file = ROOT / "tests" / path
            if not file.is_file() or not re.search(rf"^(async )?def {name}\(", file.read_text(encoding="utf-8"), re.M):
                missing.append(f"{path}::{name}")
    assert not missing, f"the conformance table cites tests that do not exist: {missing}"
