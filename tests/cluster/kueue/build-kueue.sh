#!/usr/bin/env bash
# Builds Kueue's manager (sigs.k8s.io/kueue/cmd/kueue, the version pinned in this module's go.mod) into
# tests/cluster/bin/kueue, for the end-to-end comparison in bench/e2e/ only (admitd never needs it).
# Idempotent: skips when bin/.kueue-stamp matches go.mod + go.sum + Go version. Progress on stderr;
# stdout prints the Kueue module's directory (its CRDs, manifests and performance configs), so callers
# can use it. About 2 minutes and 2 GB of memory on a warm module cache.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
bin="$(cd "${here}/.." && pwd)/bin"
cd "${here}"

log() { printf '[kueue-build] %s\n' "$*" >&2; }

go_cmd="$(command -v go || true)"
if [[ -z "${go_cmd}" && -x /usr/local/go/bin/go ]]; then
	go_cmd=/usr/local/go/bin/go
fi
if [[ -z "${go_cmd}" ]]; then
	log "error: no Go toolchain (need Go >= 1.26 on PATH or at /usr/local/go/bin/go)"
	exit 1
fi

mkdir -p "${bin}"
exec 9>"${bin}/.kueue-lock"
if ! flock -n 9; then
	log "another Kueue build is running; waiting for it"
	flock 9
fi

kueue_version="$("${go_cmd}" list -m -f '{{.Version}}' sigs.k8s.io/kueue)"
stamp="$(
	{
		echo "stamp 1"
		echo "$("${go_cmd}" env GOVERSION GOOS GOARCH | tr '\n' ' ')"
		cat go.mod go.sum
	} | sha256sum | cut -d' ' -f1
)"

kueue_dir() {
	local dir
	dir="$("${go_cmd}" list -m -f '{{.Dir}}' sigs.k8s.io/kueue)"
	if [[ -z "${dir}" || ! -d "${dir}" ]]; then
		"${go_cmd}" mod download sigs.k8s.io/kueue
		dir="$("${go_cmd}" list -m -f '{{.Dir}}' sigs.k8s.io/kueue)"
	fi
	echo "${dir}"
}

if [[ -x "${bin}/kueue" && -f "${bin}/.kueue-stamp" && "$(cat "${bin}/.kueue-stamp")" == "${stamp}" ]]; then
	log "kueue ${kueue_version} up to date in ${bin}"
	kueue_dir
	exit 0
fi
rm -f "${bin}/.kueue-stamp"

export CGO_ENABLED=0
start=${SECONDS}
log "building kueue ${kueue_version} into ${bin} (about 2 minutes on a warm module cache)"
"${go_cmd}" mod download
ldflags="-s -w -X sigs.k8s.io/kueue/pkg/version.GitVersion=${kueue_version}"
ldflags+=" -X sigs.k8s.io/kueue/pkg/version.GitCommit=module-proxy"
"${go_cmd}" build -buildvcs=false -ldflags "${ldflags}" -o "${bin}/kueue.new" sigs.k8s.io/kueue/cmd/kueue
mv -f "${bin}/kueue.new" "${bin}/kueue"
echo "${stamp}" >"${bin}/.kueue-stamp"
log "kueue built in $((SECONDS - start))s"
kueue_dir
