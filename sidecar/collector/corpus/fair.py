"""A queue that hands out work round-robin by team, then by group within a team (issue 25 item 3).

The corpus runner's workers take their next item from one :class:`FairQueue`: a team with five
large groups queued gets one turn in each round, as does a team with one small group, so
nobody's experiment waits for another team's to finish. Within a team its groups take turns
too (an A/B comparison is not stuck behind an experiment queued before it). Within a group,
items come out in the order they were put (dataset order).

Each group has its own cap on items in hand (``eligible``): a getter skips a group at its cap
and takes the next one in turn. Unbounded on purpose: the driver puts at most the items a
group still has to run, once each (it keeps what is queued), so its size is bounded by the
runnable groups' items. ``get`` waits; ``put`` never blocks. Single event loop, no locks.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict, deque
from typing import Callable, Generic, TypeVar

T = TypeVar("T")


class FairQueue(Generic[T]):
    def __init__(self) -> None:
        #: team -> group -> units, in turn order (a served team or group moves to the back).
        self._teams: OrderedDict[str, OrderedDict[str, deque[T]]] = OrderedDict()
        self._size = 0
        self._ready = asyncio.Event()

    def __len__(self) -> int:
        return self._size

    def put(self, team: str, group: str, unit: T) -> None:
        self._teams.setdefault(team, OrderedDict()).setdefault(group, deque()).append(unit)
        self._size += 1
        self._ready.set()

    def get_nowait(self, eligible: Callable[[str], bool] = lambda group: True) -> T | None:
        """The next unit in turn of a group ``eligible`` says may take one more (a group at its
        own cap waits its next turn), or None when there is none."""
        for team, groups in list(self._teams.items()):
            for group, units in list(groups.items()):
                if not eligible(group):
                    continue
                unit = units.popleft()
                self._size -= 1
                groups.move_to_end(group)
                if not units:
                    del groups[group]
                self._teams.move_to_end(team)
                if not groups:
                    del self._teams[team]
                return unit
        return None

    async def get(self, eligible: Callable[[str], bool] = lambda group: True) -> T:
        """Wait for the next unit in turn (see :meth:`get_nowait`); looks again on each
        :meth:`put` and :meth:`poke`."""
        while True:
            self._ready.clear()
            unit = self.get_nowait(eligible)
            if unit is not None:
                return unit
            await self._ready.wait()

    def poke(self) -> None:
        """Wake the waiting getters: a group may be eligible again (one of its items ended)."""
        self._ready.set()

    def drop_group(self, team: str, group: str) -> list[T]:
        """Take every unit of one group out (it ended); returns them."""
        groups = self._teams.get(team)
        if groups is None or group not in groups:
            return []
        units = list(groups.pop(group))
        self._size -= len(units)
        if not groups:
            del self._teams[team]
        return units
