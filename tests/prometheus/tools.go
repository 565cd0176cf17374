// Pins promtool (Prometheus v3.6.0's rule tester) for tests/prometheus/build.sh; nothing here is built into admitd.
//go:build tools

package tools

import _ "github.com/prometheus/prometheus/cmd/promtool"
