"""Small scenario documents as YAML text, for the input-hardening tests: one flavor, one ClusterQueue of 8 GPUs,
one LocalQueue in namespace `research`, and jobs built by `job()`. Pure text; nothing is run here."""

from __future__ import annotations

import json

BASE = """\
apiVersion: kueue.x-k8s.io/v1beta1
kind: ResourceFlavor
metadata: {name: gpu}
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: ClusterQueue
metadata: {name: team}
spec:
  namespaceSelector: {}
  resourceGroups:
  - coveredResources: ["nvidia.com/gpu"]
    flavors:
    - name: gpu
      resources:
      - {name: "nvidia.com/gpu", nominalQuota: 8}
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: LocalQueue
metadata: {name: research-queue, namespace: research}
spec: {clusterQueue: team}
"""


def job(
    name: str,
    *,
    namespace: str = "research",
    queue: str = "research-queue",
    gpus: object = 1,
    parallelism: int = 1,
    runtime: str | None = "1m",
    submit_at: str | None = None,
    labels: dict[str, str] | None = None,
    priority_class_name: str | None = None,
) -> str:
    """One batch/v1 Job document; strings go through JSON so any character (newline, ESC) is written exactly."""
    annotations: dict[str, str] = {}
    if runtime is not None:
        annotations["simulate.admitd.io/runtime"] = runtime
    if submit_at is not None:
        annotations["simulate.admitd.io/submit-at"] = submit_at
    pod: dict[str, object] = {
        "containers": [{"name": "main", "resources": {"requests": {"nvidia.com/gpu": gpus}}}],
    }
    if priority_class_name is not None:
        pod["priorityClassName"] = priority_class_name
    doc = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {"kueue.x-k8s.io/queue-name": queue, **(labels or {})},
            "annotations": annotations,
        },
        "spec": {"parallelism": parallelism, "template": {"spec": pod}},
    }
    return "---\n" + json.dumps(doc) + "\n"  # JSON is YAML
