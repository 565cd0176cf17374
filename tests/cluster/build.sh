#!/usr/bin/env bash
# Builds the local control plane's binaries (etcd, kube-apiserver, kube-controller-manager,
# kube-scheduler, kubectl, kwok) from this Go module into tests/cluster/bin/, plus
# bin/kwok-stages.yaml (kwok's pod and node stages).
# Idempotent: skips the build when bin/.stamp matches go.mod + go.sum + Go version + binary list.
# Progress goes to stderr, so callers can keep stdout for their own output.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
bin="${here}/bin"
cd "${here}"

log() { printf '[cluster-build] %s\n' "$*" >&2; }

go_cmd="$(command -v go || true)"
if [[ -z "${go_cmd}" && -x /usr/local/go/bin/go ]]; then
	go_cmd=/usr/local/go/bin/go
fi
if [[ -z "${go_cmd}" ]]; then
	log "error: no Go toolchain (need Go >= 1.26 on PATH or at /usr/local/go/bin/go)"
	exit 1
fi

# name=package; the order is the build order (small first, so a broken graph fails fast).
targets=(
	"etcd=go.etcd.io/etcd/server/v3"
	"kwok=sigs.k8s.io/kwok/cmd/kwok"
	"kube-apiserver=k8s.io/kubernetes/cmd/kube-apiserver"
	"kube-controller-manager=k8s.io/kubernetes/cmd/kube-controller-manager"
	"kube-scheduler=k8s.io/kubernetes/cmd/kube-scheduler"
	"kubectl=k8s.io/kubernetes/cmd/kubectl"
)

mkdir -p "${bin}"
# Two callers (a pytest session and a shell) must not build into the same folder at once.
exec 9>"${bin}/.lock"
if ! flock -n 9; then
	log "another build is running; waiting for it"
	flock 9
fi

go_version="$("${go_cmd}" env GOVERSION)"
stamp_version=1 # bump when the build flags or write_kwok_stages change
stamp="$(
	{
		echo "stamp ${stamp_version}"
		echo "${go_version} $("${go_cmd}" env GOOS GOARCH | tr '\n' ' ')"
		printf '%s\n' "${targets[@]}"
		cat go.mod go.sum
	} | sha256sum | cut -d' ' -f1
)"

# kwok's own stage files from its module (the version pinned in go.mod), not copies:
# node-initialize and heartbeat-with-lease for the fake nodes; the "fast" pod-ready and pod-delete
# (no delay); and the "general" pod-complete, which honours the per-pod annotation
# pod-complete.stage.kwok.x-k8s.io/delay (default 1s). That stage also has a default jitter of
# 5000 ms that caps every delay at 5 s (kwok returns the jitter when it is below the delay), so
# the default jitter line is dropped: a pod then completes after exactly its annotated delay,
# and the annotation pod-complete.stage.kwok.x-k8s.io/jitter-delay still works.
write_kwok_stages() {
	local kwok_dir stages=kustomize/stage
	kwok_dir="$("${go_cmd}" list -m -f '{{.Dir}}' sigs.k8s.io/kwok)"
	if [[ -z "${kwok_dir}" || ! -d "${kwok_dir}/${stages}" ]]; then
		"${go_cmd}" mod download sigs.k8s.io/kwok
		kwok_dir="$("${go_cmd}" list -m -f '{{.Dir}}' sigs.k8s.io/kwok)"
	fi
	local complete="${kwok_dir}/${stages}/pod/general/pod-complete.yaml"
	local jitter='^    jitterDurationMilliseconds: 5000$'
	if [[ "$(grep -c "${jitter}" "${complete}")" != 1 ]]; then
		log "error: ${complete} no longer has the expected default jitter line; review write_kwok_stages"
		exit 1
	fi
	{
		cat "${kwok_dir}/${stages}/node/fast/node-initialize.yaml"
		echo "---"
		cat "${kwok_dir}/${stages}/node/heartbeat-with-lease/node-heartbeat-with-lease.yaml"
		echo "---"
		cat "${kwok_dir}/${stages}/pod/fast/pod-ready.yaml"
		echo "---"
		grep -v "${jitter}" "${complete}"
		echo "---"
		cat "${kwok_dir}/${stages}/pod/fast/pod-delete.yaml"
	} >"${bin}/kwok-stages.yaml.new"
	mv -f "${bin}/kwok-stages.yaml.new" "${bin}/kwok-stages.yaml"
}

all_present=true
for t in "${targets[@]}"; do
	[[ -x "${bin}/${t%%=*}" ]] || all_present=false
done
[[ -f "${bin}/kwok-stages.yaml" ]] || all_present=false
if ${all_present} && [[ -f "${bin}/.stamp" && "$(cat "${bin}/.stamp")" == "${stamp}" ]]; then
	log "binaries up to date in ${bin}"
	exit 0
fi
rm -f "${bin}/.stamp"

kube_version="$("${go_cmd}" list -m -f '{{.Version}}' k8s.io/kubernetes)" # e.g. v1.36.3
kube_major="${kube_version#v}"
kube_major="${kube_major%%.*}"
kube_minor="$(echo "${kube_version}" | cut -d. -f2)"
# Same -X flags as upstream's hack/lib/version.sh, so `kubectl version` and /version are truthful.
version_ldflags=""
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
	version_ldflags+=" -X ${pkg}.gitVersion=${kube_version}"
	version_ldflags+=" -X ${pkg}.gitMajor=${kube_major}"
	version_ldflags+=" -X ${pkg}.gitMinor=${kube_minor}"
	version_ldflags+=" -X ${pkg}.gitTreeState=clean"
done

export CGO_ENABLED=0
start_all=${SECONDS}
log "building ${#targets[@]} binaries with ${go_version} (Kubernetes ${kube_version}) into ${bin}"
log "a cold build takes about 7 minutes on 2 cores; later runs reuse the Go build cache"

log "downloading modules"
"${go_cmd}" mod download

i=0
for t in "${targets[@]}"; do
	i=$((i + 1))
	name="${t%%=*}"
	pkg="${t#*=}"
	start=${SECONDS}
	log "[${i}/${#targets[@]}] ${name} (${pkg})"
	# Heartbeat, so that a long compile does not look like a hang in CI logs.
	# It closes the lock's descriptor and takes its sleep down with it, so nothing outlives the build.
	(
		exec 9>&-
		trap 'kill "${nap}" 2>/dev/null; exit 0' TERM
		while :; do
			sleep 60 &
			nap=$!
			wait "${nap}"
			log "    ... still building ${name} ($((SECONDS - start))s)"
		done
	) &
	heartbeat=$!
	status=0
	"${go_cmd}" build -buildvcs=false -ldflags "-s -w${version_ldflags}" \
		-o "${bin}/${name}.new" "${pkg}" || status=$?
	kill "${heartbeat}" 2>/dev/null || true
	wait "${heartbeat}" 2>/dev/null || true
	if [[ ${status} -ne 0 ]]; then
		log "error: building ${name} failed (exit ${status})"
		exit "${status}"
	fi
	mv -f "${bin}/${name}.new" "${bin}/${name}"
	log "[${i}/${#targets[@]}] ${name} done in $((SECONDS - start))s"
done

write_kwok_stages
echo "${stamp}" >"${bin}/.stamp"
log "all binaries built in $((SECONDS - start_all))s"
