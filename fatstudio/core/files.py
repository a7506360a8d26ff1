"""Files written whole or not at all, and the OSError behind an error: what the run folder, the probe files and
the reference curves share."""
from __future__ import annotations

import contextlib
import os
import re
import tempfile
from pathlib import Path


def atomic_write(path: Path, data: bytes | str) -> None:
    """Write to a temporary file beside ``path``, flush it to disk, then rename it into place. A failed write
    (a full disk) leaves ``path`` as it was, removes the temporary file and raises an OSError naming ``path``."""
    path = Path(path)
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except OSError as e:
        raise naming(e, path) from None
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data.encode("utf-8") if isinstance(data, str) else data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as e:
        with contextlib.suppress(OSError):
            Path(tmp).unlink(missing_ok=True)
        if isinstance(e, OSError):
            raise naming(e, path) from None
        raise


def os_error_in(e: BaseException) -> OSError | None:
    """The OSError behind ``e`` (a full disk, a folder that refuses writes): ``e`` itself, its cause or context,
    or the "(os error N)" that safetensors' own error ends with; None if there is none."""
    seen: BaseException | None = e
    for _ in range(8):
        if seen is None:
            break
        if isinstance(seen, OSError):
            return seen
        seen = seen.__cause__ or seen.__context__
    found = re.search(r"\(os error (\d+)\)", str(e))
    if found:
        number = int(found.group(1))
        return OSError(number, os.strerror(number))
    return None


def naming(e: OSError, path: Path) -> OSError:
    """``e`` with ``path`` as its file name (a write error says which file, not its temporary's), of the same
    OSError subclass (OSError picks it from the errno)."""
    return OSError(e.errno, e.strerror or str(e), str(path))
