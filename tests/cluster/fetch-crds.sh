#!/usr/bin/env bash
# Fetches the CRDs of the distributed training kinds from the projects' own released Go modules, through the Go
# module proxy, into tests/cluster/bin/crds/ (git-ignored): PyTorchJob from the Kubeflow training operator, RayJob
# from KubeRay's ray-operator, JobSet from sigs.k8s.io/jobset. The cluster tests install them
# (tests/integration/daemon_harness.py install_job_crds). Nothing is copied by hand and nothing is kept in git:
# the versions below are the only source. Idempotent: skips when bin/crds/.stamp matches this list.
# Prints the directory on stdout; progress on stderr.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
out="${here}/bin/crds"

log() { printf '[fetch-crds] %s\n' "$*" >&2; }

# module@version  path of the CRD in the module
crds=(
	"github.com/kubeflow/training-operator@v1.8.1 manifests/base/crds/kubeflow.org_pytorchjobs.yaml"
	"github.com/ray-project/kuberay/ray-operator@v1.5.0 config/crd/bases/ray.io_rayjobs.yaml"
	"sigs.k8s.io/jobset@v0.10.1 config/components/crd/bases/jobset.x-k8s.io_jobsets.yaml"
)

stamp="$(printf '%s\n' "${crds[@]}" | sha256sum | cut -d' ' -f1)"
if [[ -f "${out}/.stamp" && "$(cat "${out}/.stamp")" == "${stamp}" ]]; then
	echo "${out}"
	exit 0
fi

go_cmd="$(command -v go || true)"
if [[ -z "${go_cmd}" && -x /usr/local/go/bin/go ]]; then
	go_cmd=/usr/local/go/bin/go
fi
if [[ -z "${go_cmd}" ]]; then
	log "error: no Go toolchain (need Go on PATH or at /usr/local/go/bin/go)"
	exit 1
fi

mkdir -p "${out}"
work="$(mktemp -d)"
trap 'rm -rf "${work}"' EXIT
(cd "${work}" && "${go_cmd}" mod init admitd.local/fetch-crds >/dev/null 2>&1)
rm -f "${out}"/*.yaml "${out}/.stamp"
for entry in "${crds[@]}"; do
	module="${entry%% *}"
	file="${entry#* }"
	log "downloading ${module}"
	dir="$(cd "${work}" && GOFLAGS=-mod=mod "${go_cmd}" mod download -json "${module}" |
		sed -n 's/^[[:space:]]*"Dir": "\(.*\)",\{0,1\}$/\1/p')"
	if [[ -z "${dir}" || ! -f "${dir}/${file}" ]]; then
		log "error: ${module} has no ${file}"
		exit 1
	fi
	cp "${dir}/${file}" "${out}/$(basename "${file}")"
	chmod 644 "${out}/$(basename "${file}")"
done
echo "${stamp}" >"${out}/.stamp"
log "done: $(ls "${out}" | tr '\n' ' ')"
echo "${out}"
