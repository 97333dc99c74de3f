"""Drop counts gateway plugins report in the ``Shadowtrial-Plugin-Stats`` header.

A plugin drops what the sidecar never sees (a full buffer, a tap that did not answer), so it
reports its own cumulative counts on every POST: ``{"instance": "<id>", "dropped":
{"<reason>": n}}``. The tap hands the header to :meth:`PluginStats.record`; the admin
``/metrics`` exports :meth:`PluginStats.totals` as ``shadowtrial_plugin_dropped_total{reason}``.

Bounded on purpose, because the header comes from outside: a value over
:data:`MAX_HEADER_CHARS`, not JSON, or of another shape is ignored (counted in
``ignored``); reasons outside :data:`REASONS` are summed as ``other`` (labels stay a fixed
set); at most :data:`MAX_INSTANCES` instances are kept, the least recently heard from
evicted first — its counts are kept in a retired total, so a sum never goes down. A count
lower than the instance reported before is ignored (counts are cumulative; a restarted
plugin is a new instance). The tap's event loop records; ``/metrics`` and the OTLP reader's
thread read the totals, so a lock guards both.
"""

from __future__ import annotations

import json
import re
import threading
from collections import Counter, OrderedDict

#: The drop reasons exported, as the LiteLLM plugin names them (``no_call_id``: a served call
#: without a call id, e.g. a caller's empty ``x-litellm-call-id``); anything else is ``other``.
REASONS = ("buffer_full", "too_large", "timeout", "unreachable", "http_4xx", "http_5xx", "error", "no_call_id",
           "other")
MAX_HEADER_CHARS = 2048
MAX_INSTANCES = 1000
HEADER = "Shadowtrial-Plugin-Stats"
_INSTANCE = re.compile(r"[A-Za-z0-9_.:-]{1,64}")
#: Largest count taken (2**53: exact in a float, far beyond any real count).
_MAX_COUNT = 2**53


class PluginStats:
    def __init__(self, max_instances: int = MAX_INSTANCES) -> None:
        self._max = max_instances
        self._instances: OrderedDict[str, Counter[str]] = OrderedDict()
        self._retired: Counter[str] = Counter()
        #: Headers that were present but not taken.
        self.ignored = 0
        self._lock = threading.Lock()

    def record(self, value: str | None) -> bool:
        """Take one header value (None: no header); False when it was ignored."""
        if value is None:
            return True
        parsed = _parse(value)
        if parsed is None:
            self.ignored += 1
            return False
        instance, dropped = parsed
        with self._lock:
            self._take(instance, dropped)
        return True

    def _take(self, instance: str, dropped: Counter[str]) -> None:
        counts = self._instances.get(instance)
        if counts is None:
            counts = self._instances[instance] = Counter()
            while len(self._instances) > self._max:
                _, oldest = self._instances.popitem(last=False)
                self._retired.update(oldest)
        else:
            self._instances.move_to_end(instance)
        for reason, n in dropped.items():
            counts[reason] = max(counts[reason], n)

    def totals(self) -> dict[str, int]:
        """Drops by reason, summed over every instance ever heard from; every reason present."""
        with self._lock:
            total = Counter(self._retired)
            for counts in self._instances.values():
                total.update(counts)
        return {reason: total[reason] for reason in REASONS}

    def __len__(self) -> int:
        return len(self._instances)


def _parse(value: str) -> tuple[str, Counter[str]] | None:
    if len(value) > MAX_HEADER_CHARS:
        return None
    try:
        doc = json.loads(value)
    except (ValueError, RecursionError):
        return None
    if not isinstance(doc, dict):
        return None
    instance, dropped = doc.get("instance"), doc.get("dropped", {})
    if not isinstance(instance, str) or not _INSTANCE.fullmatch(instance) or not isinstance(dropped, dict):
        return None
    counts: Counter[str] = Counter()
    for reason, n in dropped.items():
        if type(n) is not int or not 0 <= n <= _MAX_COUNT:
            return None
        counts[reason if reason in REASONS else "other"] += n
    return instance, counts
