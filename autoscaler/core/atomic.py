"""Files replaced whole: a reader sees the old text or the new, never half of either."""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path


def write_atomic(path: Path, text: str, *, encoding: str = "utf-8", prefix: str = ".") -> None:
    """Write ``text`` to ``path`` (mode 0600) through a temporary file in the same
    directory, synced before it replaces ``path``; the temporary file (``<prefix>…tmp``)
    is removed if anything fails."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=prefix, suffix=".tmp")
    try:
        os.fchmod(fd, 0o600)
        with os.fdopen(fd, "w", encoding=encoding) as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
