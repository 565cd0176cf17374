"""The key admitd signs its admission notes with (`daemon.domain.trust`): a file only admitd reads.

Inside the cluster it is a Secret mounted into admitd's pod (no API access to Secrets is needed, and tenants have
none to that namespace); replicas that may take over from each other must mount the same one. Without it, the first
start makes one beside the log (mode 0600), which is enough for a single daemon and its restarts.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path

from daemon.domain.trust import KEY_BYTES
from daemon.obs.logging import get_logger

log = get_logger("admitd.admission_key")


class AdmissionKeyError(Exception):
    """The admission key file exists but cannot be used (unreadable, too short)."""


def load_or_make_key(path: Path) -> bytes:
    """The key in `path` (its bytes, surrounding whitespace dropped), made when the file does not exist."""
    try:
        key = path.read_bytes().strip()
    except FileNotFoundError:
        path.parent.mkdir(parents=True, exist_ok=True)
        fresh = secrets.token_hex(KEY_BYTES).encode()
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except OSError as e:
            raise AdmissionKeyError(f"cannot make the admission key {path}: {e.strerror}") from e
        with os.fdopen(fd, "wb") as f:
            f.write(fresh + b"\n")
        log.info("admission key made", path=str(path))
        return fresh
    except OSError as e:
        raise AdmissionKeyError(f"cannot read the admission key {path}: {e.strerror}") from e
    if len(key) < KEY_BYTES:
        raise AdmissionKeyError(
            f"the admission key {path} has {len(key)} bytes; it needs at least {KEY_BYTES} "
            "(make one with: openssl rand -hex 32)"
        )
    return key
