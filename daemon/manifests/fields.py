"""Typed reading of one raw manifest: each accessor checks a field's type and syntax, and records a
`ManifestError` with the field's path instead of raising, so one bad field never hides the next one.

Paths are written as Kubernetes writes them: ``spec.resourceGroups[0].coveredResources[1]``, map keys as ``[key]``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import TypeVar

from daemon.domain.quantity import QuantityError, parse_exact, resource_milli
from daemon.manifests.errors import ManifestError

__all__ = [
    "INT32_MAX",
    "INT32_MIN",
    "INT64_MAX",
    "MAX_ANNOTATIONS_BYTES",
    "Quantity",
    "Reader",
    "at",
    "describe",
    "dns_label",
    "dns_label_name",
    "dns_subdomain",
    "index",
    "key",
    "label_value",
    "printable",
    "qualified_name",
    "shown",
]

E = TypeVar("E")

_Syntax = Callable[[str], "str | None"]
"""A syntax check: what is wrong with the value, or None."""

INT32_MIN = -(2**31)
INT32_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1
"""Every integer the event log stores (SQLite INTEGER, Kueue's int64 milli-values) must fit below this."""

MAX_ANNOTATIONS_BYTES = 256 * 1024
"""apimachinery's TotalAnnotationSizeLimitB: keys and values of one object's annotations together."""

_DNS1123_LABEL = re.compile(r"[a-z0-9](?:[-a-z0-9]*[a-z0-9])?")
_DNS1123_SUBDOMAIN = re.compile(r"[a-z0-9](?:[-a-z0-9]*[a-z0-9])?(?:\.[a-z0-9](?:[-a-z0-9]*[a-z0-9])?)*")
_QUALIFIED_NAME_PART = re.compile(r"(?:[A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")


def at(path: str, name: str) -> str:
    """``path.name``: a struct field."""
    return f"{path}.{name}" if path else name


def index(path: str, i: int) -> str:
    """``path[i]``: a list item."""
    return f"{path}[{i}]"


def key(path: str, k: str) -> str:
    """``path[k]``: a map entry (resource and label names contain dots, so they are bracketed)."""
    return f"{path}[{k}]"


def describe(value: object) -> str:
    """What a wrongly typed value is, in YAML terms."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"a boolean ({str(value).lower()})"
    if isinstance(value, int) and abs(value) >= 10**40:
        return f"a number ({value.bit_length()} bits long)"  # repr of a 5,000-digit int raises
    if isinstance(value, int | float):
        return f"a number ({value!r})"
    if isinstance(value, str):
        return f"a string ({shown(value)})"
    if isinstance(value, Mapping):
        return "an object"
    if isinstance(value, Sequence):
        return "a list"
    return type(value).__name__


def _short(text: str) -> str:
    return text if len(text) <= 40 else f"{text[:32]}... ({len(text)} characters)"


def printable(text: str) -> str:
    """`text` safe for a terminal: every non-printable character (newline, ESC, bidi overrides) is written as
    its escape (``\\n``, ``\\x1b``, ``\\u202e``), so no input can move the cursor, recolour or forge a line."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def shown(value: str, limit: int = 64) -> str:
    """`value` quoted for a message: repr escapes newlines and control characters, and a long value is cut, so
    a hostile name can neither forge a line nor flood the terminal."""
    if len(value) <= limit:
        return repr(value)
    return f"{value[:limit]!r}... ({len(value)} characters)"


# --- syntax checks: each returns what is wrong, or None ----------------------------------------------------


def dns_subdomain(value: str) -> str | None:
    """An object name (RFC 1123 subdomain), as Kubernetes requires of most names and Kueue of references."""
    if len(value) > 253:
        return "must be no more than 253 characters"
    if not _DNS1123_SUBDOMAIN.fullmatch(value):
        return "must consist of lower case alphanumeric characters, '-' or '.', and start and end alphanumerically"
    return None


def dns_label(value: str) -> str | None:
    """A namespace name (RFC 1123 label)."""
    if len(value) > 63:
        return "must be no more than 63 characters"
    if not _DNS1123_LABEL.fullmatch(value):
        return "must consist of lower case alphanumeric characters or '-', and start and end alphanumerically"
    return None


def dns_label_name(value: str) -> str | None:
    """An object name that must also be a label value: a DNS-1123 subdomain of at most 63 characters. A Job's name
    is copied into its pods' `batch.kubernetes.io/job-name` label, so the apiserver refuses longer ones."""
    if len(value) > 63:
        return "must be no more than 63 characters"
    return dns_subdomain(value)


def qualified_name(value: str) -> str | None:
    """A label key or resource name: an optional DNS-subdomain prefix and '/', then a name of up to 63 characters."""
    prefix, slash, name = value.rpartition("/")
    if slash:
        if not prefix:
            return "prefix part must be non-empty"
        problem = dns_subdomain(prefix)
        if problem:
            return f"prefix part {problem}"
    if not name:
        return "name part must be non-empty"
    if len(name) > 63:
        return "name part must be no more than 63 characters"
    if not _QUALIFIED_NAME_PART.fullmatch(name):
        return "name part must consist of alphanumeric characters, '-', '_' or '.', and start and end alphanumerically"
    return None


def label_value(value: str) -> str | None:
    """A label value: empty, or up to 63 alphanumerics with '-', '_', '.' inside."""
    if len(value) > 63:
        return "must be no more than 63 characters"
    if value and not _QUALIFIED_NAME_PART.fullmatch(value):
        return (
            "must be empty or consist of alphanumeric characters, '-', '_' or '.', and start and end alphanumerically"
        )
    return None


@dataclass(frozen=True, slots=True, kw_only=True)
class Quantity:
    """A parsed quantity field: its exact value and the text it was written as, for messages."""

    exact: Fraction
    text: str

    def milli(self, resource: str) -> int:
        return resource_milli(self.exact, resource)


@dataclass(slots=True, kw_only=True)
class Reader:
    """Reads the fields of one object and collects what is wrong with them. Mutable, and short-lived: one per
    document, dropped once its `Parsed` is built."""

    kind: str
    name: str = ""
    namespace: str | None = None
    document: int | None = None
    errors: list[ManifestError] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    @property
    def subject(self) -> str:
        return ManifestError(
            "", kind=self.kind, name=self.name, namespace=self.namespace, document=self.document
        ).subject

    def error(self, path: str, message: str) -> None:
        self.errors.append(
            ManifestError(
                message,
                kind=self.kind,
                name=self.name,
                namespace=self.namespace,
                field=path,
                document=self.document,
            )
        )

    def warn(self, path: str, text: str) -> None:
        """A warning reads as a sentence about the field: ``Kind name: path text``."""
        self.warnings.append(f"{self.subject}: {path} {text}")

    # --- structure ------------------------------------------------------------------------------------------

    def mapping(
        self,
        value: object,
        path: str,
        *,
        required: bool = False,
        known: Collection[str] | None = None,
        hints: Mapping[str, str] | None = None,
    ) -> dict[str, object] | None:
        """An object. With `known`, any other key is an error, as kubectl's default strict field validation makes
        it: a misspelt ``borowingLimit`` silently ignored would mean unlimited borrowing."""
        if value is None:
            if required:
                self.error(path, "required")
            return None
        if not isinstance(value, Mapping):
            self.error(path, f"expected an object, got {describe(value)}")
            return None
        out: dict[str, object] = {}
        for k, v in value.items():
            if not isinstance(k, str):
                self.error(path, f"field names must be strings, got {describe(k)}")
                continue
            if known is not None and k not in known:
                hint = (hints or {}).get(k)
                detail = hint if hint else f"known fields: {', '.join(sorted(known))}"
                self.error(at(path, k if k.isprintable() and len(k) <= 64 else shown(k)), f"unknown field ({detail})")
                continue
            out[k] = v
        return out

    def sequence(
        self,
        value: object,
        path: str,
        *,
        required: bool = False,
        min_items: int = 0,
        max_items: int | None = None,
    ) -> list[object] | None:
        if value is None:
            if required:
                self.error(path, "required")
            return None
        if isinstance(value, str | bytes) or not isinstance(value, Sequence):
            self.error(path, f"expected a list, got {describe(value)}")
            return None
        if len(value) < min_items:
            self.error(path, f"must have at least {min_items} item{'s' if min_items > 1 else ''} (got {len(value)})")
        if max_items is not None and len(value) > max_items:
            self.error(path, f"must have at most {max_items} items (got {len(value)})")
        return list(value)

    # --- scalars --------------------------------------------------------------------------------------------

    def string(
        self,
        value: object,
        path: str,
        *,
        required: bool = False,
        syntax: _Syntax | None = None,
    ) -> str | None:
        """A string; an empty string counts as absent when `required`."""
        if value is None:
            if required:
                self.error(path, "required")
            return None
        if not isinstance(value, str):
            self.error(path, f"expected a string, got {describe(value)}")
            return None
        if not value:
            if required:
                self.error(path, "required (must not be empty)")
                return None
            return value
        if syntax is not None:
            problem = syntax(value)
            if problem:
                self.error(path, f"invalid value {shown(value)}: {problem}")
                return None
        return value

    def strings(
        self,
        value: object,
        path: str,
        *,
        required: bool = False,
        min_items: int = 0,
        max_items: int | None = None,
        syntax: _Syntax | None = None,
    ) -> list[str | None] | None:
        """A list of strings; an item that is wrong is None in the result, at its index, so that indexes stay."""
        items = self.sequence(value, path, required=required, min_items=min_items, max_items=max_items)
        if items is None:
            return None
        return [self.string(v, index(path, i), required=True, syntax=syntax) for i, v in enumerate(items)]

    def string_map(
        self,
        value: object,
        path: str,
        *,
        max_items: int | None = None,
        key_syntax: _Syntax | None = None,
        value_syntax: _Syntax | None = None,
    ) -> dict[str, str]:
        """A map of strings, e.g. labels. A YAML ``8`` or ``true`` where a string belongs is an error, as it is for
        the apiserver: quote it."""
        m = self.mapping(value, path)
        out: dict[str, str] = {}
        if m is None:
            return out
        if max_items is not None and len(m) > max_items:
            self.error(path, f"must have at most {max_items} entries (got {len(m)})")
        for k, v in m.items():
            if key_syntax is not None:
                problem = key_syntax(k)
                if problem:
                    self.error(key(path, shown(k)[1:-1]), f"invalid key {shown(k)}: {problem}")
                    continue
            s = self.string(v, key(path, k), syntax=value_syntax)
            if s is not None:
                out[k] = s
        return out

    def integer(
        self,
        value: object,
        path: str,
        *,
        required: bool = False,
        minimum: int | None = None,
        maximum: int | None = None,
    ) -> int | None:
        if value is None:
            if required:
                self.error(path, "required")
            return None
        if isinstance(value, bool) or not isinstance(value, int):
            self.error(path, f"expected an integer, got {describe(value)}")
            return None
        if not -INT64_MAX - 1 <= value <= INT64_MAX:
            self.error(path, f"must fit in a 64-bit integer (got {_short(str(value))})")
            return None
        if minimum is not None and value < minimum:
            self.error(path, f"must be at least {minimum} (got {value})")
            return None
        if maximum is not None and value > maximum:
            self.error(path, f"must be at most {maximum} (got {value})")
            return None
        return value

    def boolean(self, value: object, path: str) -> bool | None:
        if value is None:
            return None
        if not isinstance(value, bool):
            self.error(path, f"expected true or false, got {describe(value)}")
            return None
        return value

    def enum(self, value: object, path: str, choices: Mapping[str, E]) -> E | None:
        """One of `choices` (the spelling in the manifest -> the domain value); the error lists them all."""
        s = self.string(value, path)
        if s is None or s == "":
            # An empty enum is what omitempty would have dropped: the caller's default applies.
            return None
        if s not in choices:
            self.error(path, f"unsupported value {s!r} (allowed: {', '.join(choices)})")
            return None
        return choices[s]

    def quantity(
        self,
        value: object,
        path: str,
        *,
        required: bool = False,
        non_negative: bool = False,
        context: str = "",
    ) -> Quantity | None:
        """A Kubernetes quantity. `context` prefixes the message, e.g. ``container "main": ``."""
        if value is None:
            if required:
                self.error(path, f"{context}required")
            return None
        try:
            exact = parse_exact(value)
        except QuantityError as e:
            self.error(path, f"{context}{e}")
            return None
        text = value.strip() if isinstance(value, str) else repr(value) if isinstance(value, float) else str(value)
        if non_negative and exact < 0:
            self.error(path, f"{context}must not be negative (got {text})")
            return None
        # Kueue (and the event log) hold quantities as int64 milli-units; whole units are counted rounded up.
        if math.ceil(abs(exact)) * 1000 > INT64_MAX:
            self.error(
                path,
                f"{context}too large (got {_short(text)}): at most {INT64_MAX // 1000 - 1} units, "
                "as quantities are held in 64-bit integers of milli-units",
            )
            return None
        return Quantity(exact=exact, text=text)
