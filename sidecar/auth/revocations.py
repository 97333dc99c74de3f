"""Revoked subjects: a file an operator (or an identity system) rewrites, read again whenever
it changes — checked on every use (one ``stat``), so a revocation counts from the moment the
file is written. One subject (a token's ``sub``) per line; blank lines and ``#`` comments are
ignored. A file that cannot be read keeps the last list read and says so."""

from __future__ import annotations

import logging
import os
import threading

log = logging.getLogger("shadowtrial.auth")


class Revocations:
    def __init__(self, path: str) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._stamp: tuple[int, int, int] | None = None
        self._subjects: frozenset[str] = frozenset()

    def revoked(self, subject: str | None) -> bool:
        if not self.path or subject is None:
            return False
        self._refresh()
        return subject in self._subjects

    def _refresh(self) -> None:
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            stamp = None
        except OSError as exc:
            log.warning("revoked subjects file %s cannot be read (%s); the last list stands", self.path, exc.strerror)
            return
        else:
            stamp = (st.st_mtime_ns, st.st_size, st.st_ino)
        with self._lock:
            if stamp == self._stamp:
                return
            if stamp is None:
                subjects: frozenset[str] = frozenset()
            else:
                try:
                    with open(self.path, encoding="utf-8") as f:
                        subjects = frozenset(
                            line.split("#", 1)[0].strip() for line in f if line.split("#", 1)[0].strip()
                        )
                except (OSError, UnicodeDecodeError) as exc:
                    log.warning("revoked subjects file %s cannot be read (%s); the last list stands", self.path, exc)
                    return
            self._stamp, self._subjects = stamp, subjects
            log.info("revoked subjects: %d", len(subjects))
