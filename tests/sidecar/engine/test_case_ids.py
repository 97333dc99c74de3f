"""Judgment ids stay unique across processes forked from one parent.

They come from a generator seeded once per process (``sidecar.engine.case._ids``); a forked
child inherits its state, so without a fresh seed two children of one parent draw the same
ids, and two sidecars forked alike write clashing judgments into one shared store.
"""

from __future__ import annotations

import os
import warnings

from sidecar.engine import case


def _ids_of_a_forked_child() -> list[str]:
    read, write = os.pipe()
    with warnings.catch_warnings():  # Python 3.12+ warns of forking a threaded process; this child only writes a pipe
        warnings.simplefilter("ignore", DeprecationWarning)
        pid = os.fork()
    if pid == 0:  # the child: three ids to the pipe, then out without any clean-up of the parent's
        os.close(read)
        os.write(write, "\n".join(case._judgment_id() for _ in range(3)).encode())
        os._exit(0)
    os.close(write)
    with os.fdopen(read, "rb") as pipe:
        ids = pipe.read().decode().split("\n")
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    return ids


def test_children_forked_from_one_parent_draw_different_judgment_ids() -> None:
    first, second = _ids_of_a_forked_child(), _ids_of_a_forked_child()
    assert len(first) == len(second) == 3
    assert not set(first) & set(second), (first, second)
    assert not set(first) & {case._judgment_id() for _ in range(3)}, "a child repeats its parent's next ids"
