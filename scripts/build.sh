#!/usr/bin/env bash
# Builds the codecage binary (default bin/codecage): static, with Go's own
# DNS resolver and no libc, so the same file runs on any Linux distribution
# and in an image with nothing else in it.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v go >/dev/null || export PATH="/usr/local/go/bin:$PATH"
out="${1:-bin/codecage}"
mkdir -p "$(dirname "$out")"
# Built beside the target and renamed over it: scripts/test.sh runs
# suites side by side, and one may be executing the binary another builds.
tmp="$out.tmp.$$"
trap 'rm -f "$tmp"' EXIT
CGO_ENABLED=0 go build -trimpath -o "$tmp" ./cmd/codecage
mv -f "$tmp" "$out"
