#!/usr/bin/env bash
# Builds KubeRay's operator (github.com/ray-project/kuberay/ray-operator, the version fetch-crds.sh takes the RayJob
# CRD from) through the Go module proxy into tests/cluster/bin/ray-operator, and its RayCluster CRD into
# bin/crds-kuberay/ (the operator watches RayClusters too). Optional: only tests marked `kuberay` use it.
# Idempotent (stamp bin/.kuberay-stamp: the version and the Go version). Prints the binary's path on stdout.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
bin="${here}/bin"
module="github.com/ray-project/kuberay/ray-operator"
version="v1.5.0"

log() { printf '[build-kuberay] %s\n' "$*" >&2; }

go_cmd="$(command -v go || true)"
if [[ -z "${go_cmd}" && -x /usr/local/go/bin/go ]]; then
	go_cmd=/usr/local/go/bin/go
fi
if [[ -z "${go_cmd}" ]]; then
	log "error: no Go toolchain (need Go on PATH or at /usr/local/go/bin/go)"
	exit 1
fi
mkdir -p "${bin}"
stamp="${module}@${version} $("${go_cmd}" env GOVERSION)"
if [[ -x "${bin}/ray-operator" && -f "${bin}/.kuberay-stamp" && "$(cat "${bin}/.kuberay-stamp")" == "${stamp}" ]]; then
	echo "${bin}/ray-operator"
	exit 0
fi
log "building ${module}@${version} (a few minutes on 2 cores)"
GOBIN="${bin}" GOFLAGS=-mod=mod "${go_cmd}" install "${module}@${version}"
dir="$(cd "$(mktemp -d)" && "${go_cmd}" mod init admitd.local/kuberay >/dev/null 2>&1 &&
	GOFLAGS=-mod=mod "${go_cmd}" mod download -json "${module}@${version}" |
	sed -n 's/^[[:space:]]*"Dir": "\(.*\)",\{0,1\}$/\1/p')"
mkdir -p "${bin}/crds-kuberay"
install -m 644 "${dir}/config/crd/bases/ray.io_rayclusters.yaml" "${bin}/crds-kuberay/"
echo "${stamp}" >"${bin}/.kuberay-stamp"
log "done"
echo "${bin}/ray-operator"
