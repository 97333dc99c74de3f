"""What the corpus services need, handed in explicitly (no runtime reach-through).

:class:`CorpusContext` holds the store (corpus tables and teams' posture), the clock, the
model resolver and the judge defaults a suite's judge metrics start from, the config's
retention default for a team with no stored posture, and the seam to a team's retained
traffic (:data:`RetainedSource`; None until retention storage exists).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, AsyncIterable, Callable, Protocol

from sidecar.ingest.wire import Exchange
from sidecar.collector.corpus.targets import TargetResolver
from sidecar.collector.store.base import CorpusRunStore, CorpusStore, TemplateStore
from sidecar.store.base import PostureStore
from sidecar.trials.create import Resolved, TrialDefaults


class CorpusBackend(CorpusStore, CorpusRunStore, TemplateStore, PostureStore, Protocol):
    """The store as the corpus services use it."""


#: A team's retained exchanges, oldest first: ``source(team)``.
RetainedSource = Callable[[str], AsyncIterable[Exchange]]


@dataclass(frozen=True, slots=True)
class CorpusContext:
    store: CorpusBackend
    clock: Callable[[], float]
    resolve: Callable[[str], Resolved]
    defaults: TrialDefaults
    default_retention: Callable[[str], bool]
    retained: RetainedSource | None = None
    #: Called after a change the runner should see at once (a retry queued); None: it polls.
    on_change: Callable[[], None] | None = None
    #: What an A/B side calls (model versions, agents); None: plain model aliases only.
    targets: TargetResolver | None = None

    @classmethod
    def from_runtime(cls, rt: Any, *, retained: RetainedSource | None = None) -> CorpusContext:
        """The context of a :class:`sidecar.runtime.Runtime` (or anything shaped like one)."""
        return cls(store=rt.store, clock=rt.clock, resolve=rt.resolve, defaults=rt.defaults(),
                   default_retention=rt.prompt_retention, retained=retained)

    async def prompt_retention(self, team: str) -> bool:
        """The team's retention now: its stored posture, else the config's default."""
        stored = await self.store.get_posture(team)
        return self.default_retention(team) if stored is None else stored.prompt_retention
