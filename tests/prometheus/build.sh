#!/usr/bin/env bash
# Builds promtool (Prometheus's rule tester) from this Go module, at the version go.mod pins, into
# tests/prometheus/bin/promtool, for tests/integration/test_alert_rules.py. Needs Go (>= 1.26, on PATH or at
# /usr/local/go/bin/go) and the Go module proxy. Idempotent: skips the build when bin/.stamp matches go.mod, go.sum
# and the Go version. Progress goes to stderr.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
bin="${here}/bin"
cd "${here}"

log() { printf '[promtool-build] %s\n' "$*" >&2; }

go_cmd="$(command -v go || true)"
if [[ -z "${go_cmd}" && -x /usr/local/go/bin/go ]]; then
	go_cmd=/usr/local/go/bin/go
fi
if [[ -z "${go_cmd}" ]]; then
	log "error: no Go toolchain (need Go >= 1.26 on PATH or at /usr/local/go/bin/go)"
	exit 1
fi

mkdir -p "${bin}"
exec 9>"${bin}/.lock"
if ! flock -n 9; then
	log "another build is running; waiting for it"
	flock 9
fi

stamp="$({ "${go_cmd}" env GOVERSION GOOS GOARCH; cat go.mod go.sum tools.go; } | sha256sum | cut -d' ' -f1)"
if [[ -x "${bin}/promtool" && -f "${bin}/.stamp" && "$(cat "${bin}/.stamp")" == "${stamp}" ]]; then
	log "promtool up to date in ${bin}"
	exit 0
fi
rm -f "${bin}/.stamp"
log "building promtool ($("${go_cmd}" list -m -f '{{.Version}}' github.com/prometheus/prometheus)) into ${bin}"
log "a cold build takes a few minutes on 2 cores; later runs reuse the Go build cache"
"${go_cmd}" build -o "${bin}/promtool.new" github.com/prometheus/prometheus/cmd/promtool
mv -f "${bin}/promtool.new" "${bin}/promtool"
echo "${stamp}" >"${bin}/.stamp"
log "done"
