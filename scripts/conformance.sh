#!/usr/bin/env bash
# Runs the official MCP conformance suite against `codecage serve`.
# Installs the suite from the npm registry (pinned: 0.1.13 runs on node 20).
# Fails on a scenario that fails without being in conformance/expected-failures.yaml,
# and on one listed there that passes.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v go >/dev/null || export PATH="/usr/local/go/bin:$PATH"

if ! command -v npx >/dev/null; then
	sudo=""
	[ "$(id -u)" -eq 0 ] || sudo="sudo"
	$sudo apt-get update -qq
	DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq nodejs npm
fi
suite="${CODECAGE_CONFORMANCE_DIR:-$HOME/.cache/codecage/conformance}"
if [ ! -x "$suite/node_modules/.bin/conformance" ]; then
	mkdir -p "$suite"
	npm install --prefix "$suite" --no-audit --no-fund --silent @modelcontextprotocol/conformance@0.1.13
fi

scripts/build.sh
state=$(mktemp -d)
log="$state/serve.log"
port=$((20000 + RANDOM % 20000))
bin/codecage serve --listen "127.0.0.1:$port" --pool-size 1 --state-dir "$state" --audit-db "$state/audit.db" >"$log" 2>&1 &
server=$!
trap 'kill $server 2>/dev/null; wait $server 2>/dev/null; rm -rf "$state"' EXIT
for _ in $(seq 100); do
	(exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break
	sleep 0.1
done
"$suite/node_modules/.bin/conformance" server --url "http://127.0.0.1:$port/mcp" \
	--expected-failures conformance/expected-failures.yaml 2>&1 | grep -v '^npm warn' | tail -45 |
	sed -E -e 's/^(✓|✗) ([^:]+): ([0-9]+) passed, ([0-9]+) failed/\1 \2 (\3 ok, \4 not ok)/' -e 's/^Total: ([0-9]+) passed, ([0-9]+) failed/conformance checks: \1 pass; \2 scenarios fail as listed in the baseline (see above)/'
