"""From raw documents to `Parsed` results: `parse_object` for one dict (from YAML or the Kubernetes API), and
`load_documents` for a multi-document YAML file, the only I/O of this package.

Content problems never raise and never stop the next document; only an unreadable file or broken YAML raises.
"""

from __future__ import annotations

import contextlib
import gc
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import yaml

from daemon.domain.model import (
    ClusterQueue,
    Cohort,
    LocalQueue,
    Namespace,
    PriorityClass,
    ResourceFlavor,
    Workload,
)
from daemon.manifests.core import parse_namespace, parse_priority_class, read_annotations, read_labels
from daemon.manifests.distributed import DistributedAdapter
from daemon.manifests.errors import ManifestError
from daemon.manifests.fields import Reader, describe, dns_label, dns_subdomain, shown
from daemon.manifests.jobs import BatchJobAdapter, adapter_for, registered_adapters
from daemon.manifests.kueue import (
    KUEUE_GROUP,
    KUEUE_VERSIONS,
    parse_cluster_queue,
    parse_cohort,
    parse_local_queue,
    parse_resource_flavor,
)

try:
    from yaml import CSafeLoader as _BaseLoader
except ImportError:  # PyYAML built without libyaml: the pure-Python loader reads the same documents, slower
    from yaml import SafeLoader as _BaseLoader  # type: ignore[assignment]

__all__ = ["Parsed", "ParsedObject", "load_documents", "parse_documents", "parse_object"]

ParsedObject = ResourceFlavor | ClusterQueue | Cohort | LocalQueue | PriorityClass | Namespace


@dataclass(frozen=True, slots=True, kw_only=True)
class Parsed:
    """One document, read. `obj` (a Kueue or core object) or `raw_job` (a job, kept raw for its `JobAdapter`) with
    `workload` (what the adapter made of it, with ``created_at=0`` and ``uid=""`` for the caller to set) is set only
    when `errors` is empty; `warnings` are whole sentences for a log line.

    `doc_index` counts every document of its file from 0, empty ones included, so it matches the ``---``
    separators; `source` and `line` (where the document starts) are set by `load_documents`.
    """

    obj: ParsedObject | None
    raw_job: Mapping[str, object] | None
    warnings: tuple[str, ...]
    errors: tuple[ManifestError, ...]
    doc_index: int
    kind: str
    name: str
    namespace: str | None
    api_version: str = ""
    source: str | None = None
    line: int | None = None
    workload: Workload | None = None

    @property
    def ok(self) -> bool:
        return not self.errors


_Parse = Callable[[Reader, Mapping[str, object]], ParsedObject | None]


@dataclass(frozen=True, slots=True, kw_only=True)
class _Kind:
    parse: _Parse
    namespaced: bool = False
    fields: tuple[str, ...] = ("apiVersion", "kind", "metadata", "spec", "status")
    name_syntax: Callable[[str], str | None] = dns_subdomain
    reads_labels: bool = False  # `parse` reads (and checks) metadata.labels itself


def _kueue(parse: Callable[[Reader, Mapping[str, object], str], ParsedObject | None], version: str) -> _Parse:
    return lambda r, doc: parse(r, doc, version)


def _kinds() -> dict[tuple[str, str], _Kind]:
    kinds: dict[tuple[str, str], _Kind] = {}
    for version in KUEUE_VERSIONS:
        av = f"{KUEUE_GROUP}/{version}"
        kinds[(av, "ResourceFlavor")] = _Kind(parse=_kueue(parse_resource_flavor, version))
        kinds[(av, "ClusterQueue")] = _Kind(parse=_kueue(parse_cluster_queue, version))
        kinds[(av, "Cohort")] = _Kind(parse=_kueue(parse_cohort, version))
        kinds[(av, "LocalQueue")] = _Kind(parse=_kueue(parse_local_queue, version), namespaced=True)
        kinds[(av, "WorkloadPriorityClass")] = _Kind(
            parse=lambda r, doc: parse_priority_class(r, doc, kind="WorkloadPriorityClass"),
            fields=("apiVersion", "kind", "metadata", "value", "description"),
        )
    kinds[("scheduling.k8s.io/v1", "PriorityClass")] = _Kind(
        parse=lambda r, doc: parse_priority_class(r, doc, kind="PriorityClass"),
        fields=("apiVersion", "kind", "metadata", "value", "globalDefault", "description", "preemptionPolicy"),
    )
    kinds[("v1", "Namespace")] = _Kind(parse=parse_namespace, name_syntax=dns_label, reads_labels=True)
    return kinds


_KINDS = _kinds()


def _supported() -> str:
    """Every kind this border reads, for the "unsupported kind" message."""
    by_kind: dict[str, list[str]] = {}
    for av, kind in _KINDS:
        by_kind.setdefault(kind, []).append(av)
    for adapter in registered_adapters():
        by_kind.setdefault(adapter.kind, []).append(adapter.api_version)
    return "; ".join(f"{kind} ({', '.join(avs)})" for kind, avs in by_kind.items())


_KIND = re.compile(r"[A-Za-z][A-Za-z0-9]{0,62}")


def _kind_syntax(value: str) -> str | None:
    return None if _KIND.fullmatch(value) else "not a kind name"


def _subject_part(value: object, syntax: Callable[[str], str | None]) -> str:
    """A kind, name or namespace as the subject of a message: as written when it is well formed, else quoted and
    escaped (its own error says what is wrong), so no message can carry a raw newline or terminal escape."""
    if not isinstance(value, str) or not value:
        return ""
    return value if syntax(value) is None else shown(value)


def parse_object(
    doc: object,
    doc_index: int = 0,
    *,
    source: str | None = None,
    line: int | None = None,
) -> Parsed:
    """Read one manifest. Never raises for bad content: what is wrong is in `Parsed.errors`, field by field."""
    if not isinstance(doc, Mapping):
        error = ManifestError(
            f"expected an object with apiVersion, kind and metadata, got {describe(doc)}", document=doc_index
        )
        return Parsed(
            obj=None,
            raw_job=None,
            warnings=(),
            errors=(error,),
            doc_index=doc_index,
            kind="",
            name="",
            namespace=None,
            source=source,
            line=line,
        )
    # The subject of every message (kind, name, namespace) is read leniently first, then checked properly.
    raw_kind, raw_av = doc.get("kind"), doc.get("apiVersion")
    raw_meta = doc.get("metadata")
    meta_view: Mapping[Any, object] = raw_meta if isinstance(raw_meta, Mapping) else {}
    raw_name, raw_ns = meta_view.get("name"), meta_view.get("namespace")
    lenient_kind = _subject_part(raw_kind, _kind_syntax)
    lenient_av = raw_av if isinstance(raw_av, str) else ""
    adapter = adapter_for(lenient_av, lenient_kind)
    spec = _KINDS.get((lenient_av, lenient_kind))
    namespace = raw_ns if isinstance(raw_ns, str) and raw_ns else None
    scoped_away = spec is not None and not spec.namespaced and namespace is not None
    r = Reader(
        kind=lenient_kind,
        name=_subject_part(raw_name, dns_subdomain),
        namespace=None if scoped_away or namespace is None else _subject_part(namespace, dns_label),
        document=doc_index,
    )
    api_version = r.string(raw_av, "apiVersion", required=True)
    kind = r.string(raw_kind, "kind", required=True)
    obj: ParsedObject | None = None
    raw_job: Mapping[str, object] | None = None
    workload: Workload | None = None
    if adapter is not None:
        if isinstance(adapter, BatchJobAdapter | DistributedAdapter):
            workload = adapter.read(r, doc, created_at=0, uid="")  # every problem, not just the first
        else:
            try:
                workload = adapter.to_workload(doc, created_at=0, uid="")
            except ManifestError as e:
                r.errors.append(e)
        namespace = namespace or "default"
        raw_job = doc
    elif spec is not None:
        meta = r.mapping(raw_meta, "metadata") or {}
        r.string(meta.get("name"), "metadata.name", required=True, syntax=spec.name_syntax)
        r.string(meta.get("namespace"), "metadata.namespace", syntax=dns_label)
        if not spec.reads_labels:
            read_labels(r, meta)
        read_annotations(r, meta)
        r.mapping(doc, "", known=spec.fields)
        if spec.namespaced and namespace is None:
            r.error("metadata.namespace", f"required: {kind} is namespaced")
        if scoped_away:
            r.warn("metadata.namespace", f"is ignored: {kind} is cluster-scoped")
            namespace = None
        obj = spec.parse(r, doc)
    elif kind and api_version:
        versions = [av for av, k in _KINDS if k == kind] + [
            a.api_version for a in registered_adapters() if a.kind == kind
        ]
        if versions:
            r.error(
                "apiVersion", f"unsupported apiVersion {api_version!r} for {kind} (supported: {', '.join(versions)})"
            )
        else:
            r.error("kind", f"unsupported kind {kind!r} in {api_version} (supported: {_supported()})")
    if r.errors:
        obj, raw_job, workload = None, None, None
    return Parsed(
        obj=obj,
        raw_job=raw_job,
        workload=workload,
        warnings=tuple(r.warnings),
        errors=tuple(r.errors),
        doc_index=doc_index,
        kind=r.kind if r.errors else kind or r.kind,
        name=r.name,
        namespace=r.namespace if r.errors and namespace is not None else namespace,
        api_version=api_version or "",
        source=source,
        line=line,
    )


_STR_TAG = "tag:yaml.org,2002:str"
_INT_TAG = "tag:yaml.org,2002:int"
_NULL_TAG = "tag:yaml.org,2002:null"
_BOOL_TAG = "tag:yaml.org,2002:bool"
_FLOAT_TAG = "tag:yaml.org,2002:float"
_MAP_TAG = "tag:yaml.org,2002:map"
_SEQ_TAG = "tag:yaml.org,2002:seq"
_MERGE_TAG = "tag:yaml.org,2002:merge"
_FAST_DEPTH = 100  # deeper documents go the library's way (no Python recursion limit to meet)
_RESOLVED: dict[str, str] = {}  # plain scalar -> its implicit tag (depends on the text only; bounded below)
_RESOLVED_MAX, _RESOLVED_LONGEST = 4096, 64


class _Slow(Exception):
    """A node the fast constructor leaves to PyYAML's own (see `_Loader.construct_plain`)."""


class _Loader(_BaseLoader):
    """YAML 1.1 safe loading, as kubectl reads manifests, except that a key repeated in one mapping is an error:
    the apiserver's strict decoding rejects it, and silently keeping the last one hides typos."""

    def resolve(self, kind: type[yaml.Node], value: Any, implicit: tuple[bool, bool]) -> str:
        # The tag of a plain scalar depends on its text only (this loader has no path resolvers), and manifests
        # repeat the same few texts ("cpu", "1", "name") thousands of times: the regex walk is done once per text.
        if kind is yaml.ScalarNode and implicit[0]:
            tag = _RESOLVED.get(value)
            if tag is None:
                tag = super().resolve(kind, value, implicit)  # type: ignore[no-untyped-call]
                if len(_RESOLVED) < _RESOLVED_MAX and len(value) <= _RESOLVED_LONGEST:
                    _RESOLVED[value] = tag
            return tag
        if kind is yaml.MappingNode and implicit:
            return _MAP_TAG  # what the library returns without path resolvers, for a mapping without a tag
        if kind is yaml.SequenceNode and implicit:
            return _SEQ_TAG
        resolved: str = super().resolve(kind, value, implicit)  # type: ignore[no-untyped-call]
        return resolved

    def construct_plain(self, node: yaml.Node, seen: set[int], depth: int = 0) -> object:
        """The document PyYAML's constructor would build, for the common case: mappings, sequences, strings,
        integers, booleans, floats and nulls with their implicit tags. Anything else (an explicit or other tag, a
        merge key, a repeated key, a node reached twice through an alias, a document deeper than `_FAST_DEPTH`)
        raises `_Slow`, and the caller constructs the whole document the library's way, which also reports
        errors. About three times faster (the 10,000-Job benchmark, bench/RESULTS.md)."""
        cls = type(node)
        if cls is yaml.ScalarNode:
            scalar = cast(yaml.ScalarNode, node)
            tag = scalar.tag
            if tag == _STR_TAG:
                return scalar.value
            if tag == _INT_TAG:
                return self.construct_bounded_int(scalar)
            if tag == _NULL_TAG:
                return None
            if tag == _BOOL_TAG:
                return self.construct_yaml_bool(scalar)
            if tag == _FLOAT_TAG:
                return self.construct_yaml_float(scalar)
            raise _Slow
        if depth >= _FAST_DEPTH or id(node) in seen:
            raise _Slow
        seen.add(id(node))
        if cls is yaml.MappingNode and node.tag == _MAP_TAG:
            out: dict[object, object] = {}
            for key_node, value_node in node.value:
                if type(key_node) is not yaml.ScalarNode or key_node.tag == _MERGE_TAG:
                    raise _Slow
                key = self.construct_plain(key_node, seen, depth + 1)
                if key in out:
                    raise _Slow  # the library's way names both lines of the duplicate
                out[key] = self.construct_plain(value_node, seen, depth + 1)
            return out
        if cls is yaml.SequenceNode and node.tag == _SEQ_TAG:
            return [self.construct_plain(item, seen, depth + 1) for item in node.value]
        raise _Slow

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        # Fast path (most mappings): plain string keys, all different as written, cannot collide once constructed.
        raw = [k.value for k, _ in node.value if isinstance(k, yaml.ScalarNode) and k.tag == _STR_TAG]
        if len(raw) == len(node.value) and len(set(raw)) == len(raw):
            return super().construct_mapping(node, deep=deep)
        seen: dict[object, int] = {}
        for key_node, _ in node.value:
            if not isinstance(key_node, yaml.ScalarNode) or key_node.tag == "tag:yaml.org,2002:merge":
                continue  # merge keys (<<) may be overridden by design
            k = self.construct_object(key_node, deep=deep)
            if isinstance(k, str | int | float | bool) or k is None:
                if k in seen:
                    raise yaml.constructor.ConstructorError(
                        "while constructing a mapping",
                        node.start_mark,
                        f"found duplicate key {k!r} (first at line {seen[k]})",
                        key_node.start_mark,
                    )
                seen[k] = key_node.start_mark.line + 1
        return super().construct_mapping(node, deep=deep)

    def construct_bounded_int(self, node: yaml.ScalarNode) -> int:
        """A YAML integer; one too long for Python to convert (over 4,300 digits) is a YAML error, not a crash."""
        try:
            value: int = super().construct_yaml_int(node)
        except ValueError as e:
            raise yaml.constructor.ConstructorError(
                None, None, f"integer too long ({len(str(node.value))} characters)", node.start_mark
            ) from e
        return value


_Loader.add_constructor("tag:yaml.org,2002:int", _Loader.construct_bounded_int)


@contextlib.contextmanager
def _fewer_collections() -> Iterator[None]:
    """Reading a large file builds many small long-lived objects; CPython's default thresholds then run full
    collections that find nothing (10-15% of reading 10,000 Jobs). Collect less often meanwhile, then restore."""
    thresholds = gc.get_threshold()
    gc.set_threshold(max(thresholds[0], 10_000), max(thresholds[1], 50), max(thresholds[2], 100))
    try:
        yield
    finally:
        gc.set_threshold(*thresholds)


def parse_documents(text: str, *, source: str = "<string>") -> list[Parsed]:
    """Every document of a multi-document YAML text, in order; empty documents are skipped."""
    with _fewer_collections():
        return _parse_documents(text, source)


def _parse_documents(text: str, source: str) -> list[Parsed]:
    out: list[Parsed] = []
    loader = _Loader(text)
    try:
        doc_index = 0
        while loader.check_node():
            node = loader.get_node()
            line = node.start_mark.line + 1 if node is not None else None
            data = None
            if node is not None:
                try:
                    data = loader.construct_plain(node, set())
                except _Slow:
                    data = loader.construct_document(node)
            if data is not None:
                out.append(parse_object(data, doc_index, source=source, line=line))
            doc_index += 1
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None) or getattr(e, "context_mark", None)
        problem = getattr(e, "problem", None) or str(e)
        context = getattr(e, "context", None)
        detail = " ".join(str(f"{problem} ({context})" if context else problem).split())  # one line
        raise ManifestError(
            f"invalid YAML: {detail}",
            source=source,
            line=mark.line + 1 if mark is not None else None,
        ) from e
    finally:
        loader.dispose()
    return out


def load_documents(path: str | Path) -> list[Parsed]:
    """Every document of a YAML file. Raises `ManifestError` naming the file (and line) when it cannot be read or
    is not valid YAML; problems inside documents are in each `Parsed`."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise ManifestError(f"not UTF-8 text ({e.reason} at byte {e.start})", source=str(p)) from e
    except OSError as e:
        raise ManifestError(f"cannot read: {e.strerror or e}", source=str(p)) from e
    return parse_documents(text, source=str(p))
