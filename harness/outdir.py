"""Output directories a user names (--to, --report-dir, --out): made writable here, or a clear error naming the flag."""

from __future__ import annotations

import os
import uuid
from pathlib import Path

from harness.errors import HarnessError


def writable_dir(path: str | Path, flag: str, what: str = "output directory") -> Path:
    """Create `path` (and its parents) and check a file can be written in it; else a HarnessError naming `flag`."""
    p = Path(path)
    try:
        p.mkdir(parents=True, exist_ok=True)
        probe = p / f".write-test-{uuid.uuid4().hex[:8]}"
        probe.write_bytes(b"")
        os.unlink(probe)
    except FileExistsError:
        raise HarnessError(f"{flag} {str(p)!r}: a file of that name is in the way, so the {what} cannot be made there; "
                           f"give a directory path ({flag} DIR) or move the file.") from None
    except NotADirectoryError:
        raise HarnessError(f"{flag} {str(p)!r}: a part of the path is a file, not a directory; give a directory path "
                           f"({flag} DIR).") from None
    except OSError as exc:
        raise HarnessError(f"{flag} {str(p)!r}: the {what} cannot be written ({exc.strerror or exc}); give a writable "
                           f"directory ({flag} DIR).") from None
    return p
