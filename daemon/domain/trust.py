"""Which admissions admitd honours: its own. Pure: the key is an argument, never read here.

The leader's own admissions are in its log. A standby (or a restarted daemon whose log is behind) also honours an
admission another replica made and carried out, as written on the job in the `admitd.io/admission` annotation, but
only with its `admitd.io/admission-signature`: an HMAC-SHA256, under a key only admitd holds, over the Job's uid and
the note. A tenant who may patch their Job can write any note but not its signature; a note copied from another Job
fails on the uid; a note put back after its admission ended (the same Job, a saved copy) fails on its time, which
the signature covers: the fold knows when the workload last stopped (`WorkloadRecord.evicted_at`).
"""

from __future__ import annotations

import hashlib
import hmac
import json

from daemon.domain.actuation import read_admission_note
from daemon.domain.model import Admission, Millis, Workload

SIGNATURE_ANNOTATION = "admitd.io/admission-signature"
ANNOTATION_PREFIX = "admitd.io/"
"""Every annotation with this prefix is admitd's to write (the validating webhook refuses anyone else's change)."""
KEY_BYTES = 32

_DOMAIN = b"admitd.io/admission\x00"  # so that a signature made for anything else never verifies as one of these


def sign(key: bytes, uid: str, note: str) -> str:
    """The signature written beside `note` on the Job with uid `uid`: hex HMAC-SHA256 under `key`."""
    return hmac.new(key, _DOMAIN + uid.encode() + b"\x00" + note.encode(), hashlib.sha256).hexdigest()


def signed(key: bytes, uid: str, note: str, signature: str) -> bool:
    return hmac.compare_digest(sign(key, uid, note), signature)


def note_time(note: str) -> Millis | None:
    """When the admission a note describes was decided (its `at`), None when the note has none."""
    try:
        at = json.loads(note).get("at")
    except (ValueError, AttributeError):
        return None
    return at if isinstance(at, int) and not isinstance(at, bool) else None


def judge_claim(
    *, key: bytes, uid: str, note: str, signature: str | None, workload: Workload, evicted_at: Millis | None
) -> Admission | str:
    """The admission a running job's note claims, when admitd made it and it has not ended; else why not, in words
    that name the annotation and the problem."""
    if not signature:
        return f"its {SIGNATURE_ANNOTATION} annotation is missing: admitd signs every admission it writes"
    if not signed(key, uid, note, signature):
        return (
            f"its {SIGNATURE_ANNOTATION} does not match the admission and the Job's uid {uid}: the admission was "
            "not written by admitd for this Job"
        )
    admission = read_admission_note(note, workload)
    if admission is None:
        return "its admitd.io/admission does not fit the Job's pod sets"
    at = note_time(note)
    if evicted_at is not None and (at is None or at <= evicted_at):
        return f"the admission it carries (decided at {at}) ended when the workload stopped at {evicted_at}"
    return admission
