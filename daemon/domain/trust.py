"""Which admissions admitd honours: its own. Pure: the key is an argument, never read here.

The leader's own admissions are in its log. A standby (or a restarted daemon whose log is behind) also honours an
admission another replica made and carried out, as written on the job in the `admitd.io/admission` annotation, but
only with its `admitd.io/admission-signature`: an HMAC-SHA256, under a key only admitd holds, over the Job's uid and
the note. A tenant who may patch their Job can write any note but not its signature; a note copied from another Job
fails on the uid; a note put back after its admission ended (the same Job, a saved copy) fails on its time, which
the signature covers: the fold knows when the workload last stopped (`WorkloadRecord.evicted_at`).

A preemption moves the note to `admitd.io/stopping` (signed under its own domain, so it can never pass for an
admission): the job's pods may take long to stop, and a replica whose watch never saw the job run (a new leader
whose watch was down) must still count their quota until they are gone. A stopping note only ever charges quota to
a job that is suspended; it admits nothing.
"""

from __future__ import annotations

import hashlib
import hmac
import json

from daemon.domain.actuation import read_admission_note
from daemon.domain.model import Admission, Millis, Workload

SIGNATURE_ANNOTATION = "admitd.io/admission-signature"
STOPPING_ANNOTATION = "admitd.io/stopping"
"""On a job being suspended by a preemption: the admission its pods still run under, until they are gone."""
STOPPING_SIGNATURE_ANNOTATION = "admitd.io/stopping-signature"
ANNOTATION_PREFIX = "admitd.io/"
"""Every annotation with this prefix is admitd's to write (the validating webhook refuses anyone else's change)."""
KEY_BYTES = 32

_DOMAIN = b"admitd.io/admission\x00"  # so that a signature made for anything else never verifies as one of these
_STOPPING_DOMAIN = b"admitd.io/stopping\x00"  # a stopping note's: never valid as an admission's


def sign(key: bytes, uid: str, note: str, *, stopping: bool = False) -> str:
    """The signature written beside `note` on the Job with uid `uid`: hex HMAC-SHA256 under `key` (a stopping
    note's under its own domain)."""
    domain = _STOPPING_DOMAIN if stopping else _DOMAIN
    return hmac.new(key, domain + uid.encode() + b"\x00" + note.encode(), hashlib.sha256).hexdigest()


def signed(key: bytes, uid: str, note: str, signature: str, *, stopping: bool = False) -> bool:
    return hmac.compare_digest(sign(key, uid, note, stopping=stopping), signature)


def note_time(note: str) -> Millis | None:
    """When the admission a note describes was decided (its `at`), None when the note has none."""
    try:
        at = json.loads(note).get("at")
    except (ValueError, AttributeError):
        return None
    return at if isinstance(at, int) and not isinstance(at, bool) else None


def judge_claim(
    *,
    key: bytes,
    uid: str,
    note: str,
    signature: str | None,
    workload: Workload,
    evicted_at: Millis | None,
    stopping: bool = False,
) -> Admission | str:
    """The admission a running job's note claims (or, `stopping`, a suspended job's stopping pods run under), when
    admitd made it and it has not ended; else why not, in words that name the annotation and the problem."""
    annotation, signature_annotation = (
        (STOPPING_ANNOTATION, STOPPING_SIGNATURE_ANNOTATION)
        if stopping
        else ("admitd.io/admission", SIGNATURE_ANNOTATION)
    )
    if not signature:
        return f"its {signature_annotation} annotation is missing: admitd signs every admission it writes"
    if not signed(key, uid, note, signature, stopping=stopping):
        return (
            f"its {signature_annotation} does not match the admission and the Job's uid {uid}: the admission was "
            "not written by admitd for this Job"
        )
    admission = read_admission_note(note, workload)
    if admission is None:
        return f"its {annotation} does not fit the Job's pod sets"
    at = note_time(note)
    if evicted_at is not None and (at is None or at <= evicted_at):
        return f"the admission it carries (decided at {at}) ended when the workload stopped at {evicted_at}"
    return admission
