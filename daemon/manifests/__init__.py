"""The border between raw manifests (dicts from YAML files or the Kubernetes API) and the typed domain objects of
`daemon.domain.model`: Kueue and core objects via `parse_object`/`load_documents`, jobs via a `JobAdapter`
(batch/v1 Job in `jobs`; PyTorchJob, RayJob and JobSet in `distributed`).
"""

from __future__ import annotations

from daemon.manifests.distributed import JobSetAdapter, PyTorchJobAdapter, RayJobAdapter
from daemon.manifests.errors import ManifestError
from daemon.manifests.jobs import (
    PRIORITY_CLASS_LABEL,
    QUEUE_NAME_LABEL,
    BatchJobAdapter,
    JobAdapter,
    adapter_for,
    register_adapter,
)
from daemon.manifests.loader import Parsed, ParsedObject, load_documents, parse_documents, parse_object

__all__ = [
    "PRIORITY_CLASS_LABEL",
    "QUEUE_NAME_LABEL",
    "BatchJobAdapter",
    "JobAdapter",
    "JobSetAdapter",
    "ManifestError",
    "Parsed",
    "ParsedObject",
    "PyTorchJobAdapter",
    "RayJobAdapter",
    "adapter_for",
    "load_documents",
    "parse_documents",
    "parse_object",
    "register_adapter",
]
