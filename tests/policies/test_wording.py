from __future__ import annotations

import pytest

from policies.verdict import VERDICT_CODES
from policies.wording import CORPUS_WORDING, corpus_wording, is_adoptable, traffic_wording


def test_every_corpus_verdict_never_reads_adoptable() -> None:
    words = {code: corpus_wording(code) for code in VERDICT_CODES}
    print(f"\ncorpus wording: {words}")
    assert words == {
        "candidate_better": "Candidate ahead",
        "equivalent": "Parity",
        "regression": "Candidate behind",
        "inconclusive": "Inconclusive",
        "not_worse": "Not behind",  # corpus results never carry it (policies.corpus_verdict)
    }
    for word in list(words.values()) + list(CORPUS_WORDING.values()):
        assert "adopt" not in word.lower()


def test_traffic_wording() -> None:
    table = {
        (code, ended, promoted): traffic_wording(code, ended=ended, promoted=promoted)
        for code in VERDICT_CODES
        for ended in (False, True)
        for promoted in (False, True)
    }
    for code in ("candidate_better", "equivalent", "not_worse"):
        assert table[(code, False, False)] == table[(code, True, False)] == "Adoptable"
        assert table[(code, True, True)] == "Adopted"
        assert is_adoptable(code)
    assert table[("regression", False, False)] == table[("regression", True, False)] == "Rejected"
    assert table[("inconclusive", False, False)] == "Collecting"
    assert table[("inconclusive", True, False)] == "Inconclusive"
    assert not is_adoptable("regression") and not is_adoptable("inconclusive")


def test_unknown_code_is_refused() -> None:
    with pytest.raises(ValueError):
        corpus_wording("adoptable")  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        traffic_wording("better", ended=False, promoted=False)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        CORPUS_WORDING["equivalent"] = "Adoptable"  # type: ignore[index]
