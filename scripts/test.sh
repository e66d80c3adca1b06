#!/usr/bin/env bash
# Runs every check: formatting, vet, and the tests (real sandboxes: run as
# root for the server mode; the rootless mode is tested from there too).
#
# The suites run side by side, CODECAGE_TEST_JOBS at a time (default 2,
# the cores of the machines it runs on: with 4 the suite kept both cores
# busy all along and took as long, at a load of 25). Each test binary gets a temporary and state directory of its
# own (scripts/go-test-exec.sh), and every leftover check counts only what
# its own process made, so packages need not run one at a time. Each
# suite's output goes to a log of its own, printed whole if it fails; the
# end prints every suite's time. Arguments are passed to every go test.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh >/dev/null
command -v go >/dev/null || export PATH="/usr/local/go/bin:$PATH"
# The tests build what ships: static, without cgo (scripts/build.sh); the
# test binaries are re-executed as the sandbox's init, as codecage is.
export CGO_ENABLED=0
# And with scripts/build.sh's -trimpath: vet and every suite then reuse
# the packages the build compiled (on a fresh machine, a cold compile of
# every dependency costs about 3 CPU minutes each time it is not shared).
export GOFLAGS="${GOFLAGS:+$GOFLAGS }-trimpath"
began=$(date +%s)

unformatted=$(gofmt -l $(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))
if [ -n "$unformatted" ]; then
	echo "gofmt: these files are not formatted:" >&2
	echo "$unformatted" >&2
	exit 1
fi
# The repository stands alone: nothing of it reads the developers' notes
# beside it (.ci/run also tests a fresh clone with nothing beside it).
if git grep -nE '[.][.]/share[d]' 2>/dev/null; then
	echo "these files refer to a directory outside the repository" >&2
	exit 1
fi
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
# The PostgreSQL tests (the shared audit store, replicas) start a throwaway
# server of Debian's postgresql as the postgres user; the package's own
# cluster is not wanted. -race needs cgo, hence a C compiler. npm installs
# the official SDKs and suites, for Go tests and scripts that run at once.
need=()
compgen -G "/usr/lib/postgresql/*/bin/pg_ctl" >/dev/null || need+=(postgresql)
command -v gcc >/dev/null || need+=(gcc libc6-dev)
command -v npm >/dev/null || need+=(nodejs npm)
if ((${#need[@]})); then
	$sudo mkdir -p /etc/postgresql-common
	[ -e /etc/postgresql-common/createcluster.conf ] || echo "create_main_cluster = false" | $sudo tee /etc/postgresql-common/createcluster.conf >/dev/null
	$sudo apt-get update -qq
	DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${need[@]}" >/dev/null
fi
go vet ./...
# Built once here; the end-to-end suites build it again from the cache.
scripts/build.sh

logs=$(mktemp -d /tmp/codecage-test-logs.XXXXXX)
exec_wrapper="-exec=$PWD/scripts/go-test-exec.sh"
# -v: each test's own time is in the logs; the end lists the slowest.
gt="$exec_wrapper -v -count=1"
declare -a names=() cmds=()
suite() { names+=("$1"); cmds+=("$2"); }

# Longest first, so that the last to start is not the one everything
# waits for: the three longest packages are suites of their own, started
# first; the rest of the packages run two at a time in "unit".
long='internal/service internal/bench internal/cli'
# Packages whose tests start no sandbox run once, under the race detector
# (the race suite), not twice: -race runs the same tests and more strictly.
# The fleet's and the harness's start real sandboxes, so they run here too,
# built as what ships (static, no cgo).
raceonly='internal/service/sizing internal/pool internal/policy internal/access internal/egress internal/upstream internal/audit internal/metrics internal/snapstore internal/session internal/bounded'
suite service "go test $gt -timeout 30m $* ./internal/service/"
# The functional suite, the containment rows and sessions again, against the
# gVisor backend (every run under runsc).
suite gvisor "CODECAGE_TEST_BACKEND=gvisor go test $gt -timeout 30m $* \
	-run 'Containment|^Test(Budget|Stdout|LastExpression|Variables|Exception|SyntaxError|Unicode|NULBytes|OneMegabyte|BadRequests|WallClock|CPUTime|OOM|OutputTruncation|SysExit|ImportPolicy|ResultReports|ConcurrentExecutions|Cancellation|Deadline|Forged|ProcHas|Session|FileAPI|PipInstallFromWheelhouse|NetworkProfile|EgressCredentials|OperatorEgress|ProfilesAllow|EnabledProfiles|EveryBasicModule|NumpyAndPandas|PlotComesBack|Validate|RunCommand)' \
	./internal/service/"
suite bench "go test $gt -timeout 30m $* ./internal/bench/"
suite cli "go test $gt -timeout 30m $* ./internal/cli/"
# The official E2B JS SDKs, unchanged, against --e2b-listen (npm registry).
suite e2e-e2b scripts/e2e-e2b.sh
# -p 2: two packages at a time.
suite unit "go test $gt -p 2 -timeout 30m $* \$(go list ./... | grep -vE \"/($(echo $long $raceonly | sed 's/ /|/g'))\$\")"
# The containment rows and commands again, every run and session started
# from an environment whose root is an image's (a Python image imported
# from a tarball), not the host's: each binary there is the image author's.
suite image "CODECAGE_TEST_ENVIRONMENT=image go test $gt -timeout 20m $* \
	-run 'Containment|^Test(RunCommand|SessionSharesOneLoopback|SessionsHaveTheirOwnLoopback)' ./internal/service/"
# The same rows under gVisor, started from that environment (runsc binds
# the image's root). NoLeftovers is left to the two runs above and the
# gVisor run: its 200 runs are the same here and take 2.5 minutes.
suite gvisor-image "CODECAGE_TEST_BACKEND=gvisor CODECAGE_TEST_ENVIRONMENT=image go test $gt -timeout 20m $* \
	-run 'Containment' -skip '^TestContainment_NoLeftovers$' ./internal/service/"
# The containment rows again, every snippet run as root inside a fresh
# machine session (docs/ATTACKS.md says where a machine differs).
# NoLeftovers is left to the runs above, as for gvisor-image.
suite machine-root "CODECAGE_TEST_MACHINE=root go test $gt -timeout 20m $* \
	-run 'Containment' -skip '^TestContainment_NoLeftovers$' ./internal/service/"
# And as root inside a gVisor machine (its sandbox's own user namespace on
# the machine's block of ids, the writable /usr in its memory).
suite gvisor-machine-root "CODECAGE_TEST_MACHINE=root CODECAGE_TEST_BACKEND=gvisor go test $gt -timeout 20m $* \
	-run 'Containment' -skip '^TestContainment_NoLeftovers$' ./internal/service/"
# The race detector over the packages whose tests need no kernel sandbox
# (the fleet's on a fake one, the session table's bookkeeping, the service's
# pure decisions), and over the audit log, the snapshot store and upstream
# clients.
suite race "CGO_ENABLED=1 go test $gt -race -timeout 15m $* ./internal/fleet ./internal/runtime \
	$(echo $raceonly | sed 's|internal/|./internal/|g') && \
	CGO_ENABLED=1 go test $gt -race $* -run '^Test(BuildResult|SpareFitting)' ./internal/service"
# Third-party E2B clients (OpenAI Agents SDK, Mastra, ComputeSDK, the E2B
# CLI) driven through their own APIs, as their users would (npm registry).
suite e2e-clients scripts/e2e-clients.sh
# The official MCP conformance suite against codecage serve (npm registry).
suite conformance scripts/conformance.sh
# The official MCP TypeScript client, end to end, over stdio and HTTP.
suite e2e-ts scripts/e2e-ts.sh
# The Helm chart: lint and render offline.
suite helm scripts/helm-check.sh
# The OpenAPI document against the official OpenAPI 3.1 schema (npm registry).
suite openapi scripts/openapi-check.sh

slots=${CODECAGE_TEST_JOBS:-2}
run_suite() {
	local name=$1 cmd=$2 start rc cpu TIMEFORMAT='%0U %0S'
	start=$(date +%s)
	# bash's time: the suite's CPU, its processes' that were waited for
	# (a sandbox's count once its init is reaped).
	{ time bash -c "set -euo pipefail; $cmd" >"$logs/$name.log" 2>&1; } 2>"$logs/$name.cpu" && rc=0 || rc=$?
	cpu=$(awk '{ print $1 + $2 }' "$logs/$name.cpu" 2>/dev/null || echo "?")
	echo "$rc $(($(date +%s) - start)) $cpu" >"$logs/$name.status"
	echo "test.sh: $name $([ "$rc" -eq 0 ] && echo passed || echo "FAILED (exit $rc)") in $(($(date +%s) - start)) s"
}
for i in "${!names[@]}"; do
	while (($(jobs -rp | wc -l) >= slots)); do wait -n || true; done
	echo "test.sh: ${names[$i]} started"
	run_suite "${names[$i]}" "${cmds[$i]}" &
done
wait

failed=()
echo "test.sh: each suite's wall and CPU time (seconds), logs in $logs"
for name in "${names[@]}"; do
	read -r rc secs cpu <"$logs/$name.status" || { rc=1 secs=? cpu=?; }
	printf '  %-14s %5s %6s  %s\n' "$name" "$secs" "$cpu" "$([ "$rc" = 0 ] && echo ok || echo "FAILED (exit $rc)")"
	[ "$rc" = 0 ] || failed+=("$name")
done
# Each package's own time, from the go test suites' logs.
cat "$logs"/{service,bench,cli,unit}.log | grep -E '^(ok|FAIL)\s' | awk '{printf "    %-60s %s\n", $2, $3}' || true
echo "test.sh: the slowest tests (seconds, suite)"
# awk, not head: head would leave sort writing into a closed pipe once the
# lines outgrow the pipe's buffer, and pipefail would end the script there,
# before the failed suites' logs.
for name in "${names[@]}"; do
	sed -nE "s/^--- (PASS|FAIL): ([^ ]+) \(([0-9.]+)s\)$/\3 \2 $name/p" "$logs/$name.log"
done | sort -rn | awk 'NR <= 25 {printf "    %8s  %-60s %s\n", $1, $2, $3}'
echo "test.sh: $(($(date +%s) - began)) s in all"
for name in "${failed[@]}"; do
	echo "===== $name: its log (passing tests' lines left out) ====="
	grep -vE '^\s*(=== (RUN|PAUSE|CONT|NAME)|--- (PASS|SKIP))' "$logs/$name.log"
done
((${#failed[@]} == 0))
