"""The one exception of the manifest border, and how it prints.

    ValueError
     └── ManifestError   a manifest (or a whole file) is wrong: permanent, never worth retrying

`parse_object` collects these in `Parsed.errors` instead of raising; `load_documents` raises one only when the file
itself cannot be read as YAML; a `JobAdapter` raises one for a job it cannot turn into a Workload.
"""

from __future__ import annotations

__all__ = ["ManifestError"]


class ManifestError(ValueError):
    """What is wrong, where: ``kind``/``name``/``namespace`` say which object, ``field`` the dotted path in it.

    ``str()`` is one line, e.g.
    ``ClusterQueue team-a: spec.resourceGroups[0].flavors[1].resources[0].nominalQuota: must not be negative
    (got -1)``. ``source``/``line`` are set only for errors about a file as a whole (YAML syntax), and then lead the
    line as ``path:line:``; ``document`` (the index in its file) names an object that has no name.
    """

    kind: str
    name: str
    namespace: str | None
    field: str
    message: str
    document: int | None
    source: str | None
    line: int | None

    def __init__(
        self,
        message: str,
        *,
        kind: str = "",
        name: str = "",
        namespace: str | None = None,
        field: str = "",
        document: int | None = None,
        source: str | None = None,
        line: int | None = None,
    ) -> None:
        self.kind = kind
        self.name = name
        self.namespace = namespace
        self.field = field
        self.message = message
        self.document = document
        self.source = source
        self.line = line
        super().__init__(self.__str__())

    @property
    def subject(self) -> str:
        """``Kind namespace/name``, or ``Kind (document N)`` when the object has no name."""
        if self.name:
            who = f"{self.namespace}/{self.name}" if self.namespace else self.name
            return f"{self.kind} {who}" if self.kind else who
        doc = f"document {self.document}" if self.document is not None else ""
        if self.kind:
            return f"{self.kind} ({doc})" if doc else self.kind
        return doc

    def __str__(self) -> str:
        parts = [p for p in (self.subject, self.field, self.message) if p]
        text = ": ".join(parts)
        if self.source is not None:
            where = f"{self.source}:{self.line}" if self.line is not None else self.source
            return f"{where}: {text}"
        return text

    def __repr__(self) -> str:
        return f"ManifestError({self.__str__()!r})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ManifestError):
            return NotImplemented
        return self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __reduce__(self) -> tuple[object, ...]:
        # Exception pickling would call __init__ with the printed line alone and lose the fields.
        return (_restore, self._key())

    def _key(self) -> tuple[str, str, str | None, str, str, int | None, str | None, int | None]:
        return (
            self.kind,
            self.name,
            self.namespace,
            self.field,
            self.message,
            self.document,
            self.source,
            self.line,
        )


def _restore(
    kind: str,
    name: str,
    namespace: str | None,
    field: str,
    message: str,
    document: int | None,
    source: str | None,
    line: int | None,
) -> ManifestError:
    return ManifestError(
        message,
        kind=kind,
        name=name,
        namespace=namespace,
        field=field,
        document=document,
        source=source,
        line=line,
    )
