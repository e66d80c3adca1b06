#!/usr/bin/env bash
# End-to-end test with the official MCP TypeScript client (npm registry),
# over stdio and streamable HTTP.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v go >/dev/null || export PATH="/usr/local/go/bin:$PATH"
scripts/npm-deps.sh e2e/ts-client
scripts/build.sh
state=$(mktemp -d)
port=$((20000 + RANDOM % 20000))
bin/codecage serve --listen "127.0.0.1:$port" --pool-size 1 --enable-data-science true \
	--data-science-pool-size 1 --state-dir "$state" --audit-db "$state/audit.db" >"$state/serve.log" 2>&1 &
server=$!
trap 'kill $server 2>/dev/null; wait $server 2>/dev/null; rm -rf "$state"' EXIT
for _ in $(seq 100); do
	(exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break
	sleep 0.1
done
node e2e/ts-client/test.mjs "$PWD/bin/codecage" "http://127.0.0.1:$port/mcp"
