#!/usr/bin/env bash
# Runs every check: formatting, vet, and the tests (real sandboxes: run as
# root for the server mode; the rootless mode is tested from there too).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh >/dev/null
command -v go >/dev/null || export PATH="/usr/local/go/bin:$PATH"
# The tests build what ships: static, without cgo (scripts/build.sh); the
# test binaries are re-executed as the sandbox's init, as codecage is.
export CGO_ENABLED=0

unformatted=$(gofmt -l $(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))
if [ -n "$unformatted" ]; then
	echo "gofmt: these files are not formatted:" >&2
	echo "$unformatted" >&2
	exit 1
fi
go vet ./...
# The repository stands alone: nothing of it reads the developers' notes
# beside it (.ci/run also tests a fresh clone with nothing beside it).
if git grep -nE '[.][.]/share[d]' 2>/dev/null; then
	echo "these files refer to a directory outside the repository" >&2
	exit 1
fi
# The PostgreSQL tests (the shared audit store, replicas) start a throwaway
# server of Debian's postgresql as the postgres user; the package's own
# cluster is not wanted.
if ! compgen -G "/usr/lib/postgresql/*/bin/pg_ctl" >/dev/null; then
	sudo=""
	[ "$(id -u)" -eq 0 ] || sudo="sudo"
	$sudo mkdir -p /etc/postgresql-common
	[ -e /etc/postgresql-common/createcluster.conf ] || echo "create_main_cluster = false" | $sudo tee /etc/postgresql-common/createcluster.conf >/dev/null
	$sudo apt-get update -qq
	DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq postgresql >/dev/null
fi
# The Helm chart: lint and render offline.
scripts/helm-check.sh
# The OpenAPI document against the official OpenAPI 3.1 schema (npm registry).
scripts/openapi-check.sh
# The official MCP conformance suite against codecage serve (npm registry).
scripts/conformance.sh
# The official MCP TypeScript client, end to end, over stdio and HTTP.
scripts/e2e-ts.sh
# The official E2B JS SDKs, unchanged, against --e2b-listen (npm registry).
scripts/e2e-e2b.sh
# The race detector over the packages whose tests need no kernel sandbox
# (the fleet's on a fake one, the session table's bookkeeping, the service's
# pure decisions), and over the audit log, the snapshot store and upstream
# clients. -race needs cgo, hence a C compiler.
if ! command -v gcc >/dev/null; then
	sudo=""
	[ "$(id -u)" -eq 0 ] || sudo="sudo"
	$sudo apt-get update -qq
	DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq gcc libc6-dev >/dev/null
fi
CGO_ENABLED=1 go test -race -count=1 -timeout 15m "$@" ./internal/pool ./internal/fleet ./internal/policy \
	./internal/access ./internal/runtime ./internal/egress ./internal/upstream ./internal/audit ./internal/metrics ./internal/snapstore \
	./internal/session ./internal/bounded
CGO_ENABLED=1 go test -race -count=1 "$@" -run '^Test(LimitsFrom|BuildResult|SpareFitting)' ./internal/service
# -p 1: the leftover checks scan the whole host, so packages run one at a time.
go test -p 1 -count=1 -timeout 30m "$@" ./...
# The containment rows and commands again, every run and session started
# from an environment whose root is an image's (a Python image imported
# from a tarball), not the host's: each binary there is the image author's.
CODECAGE_TEST_ENVIRONMENT=image go test -count=1 -timeout 20m "$@" \
	-run 'Containment|^Test(RunCommand|SessionSharesOneLoopback|SessionsHaveTheirOwnLoopback)' ./internal/service/
# The same rows under gVisor, started from that environment (runsc binds
# the image's root). NoLeftovers is left to the two runs above and the
# gVisor run below: its 200 runs are the same here and take 2.5 minutes.
CODECAGE_TEST_BACKEND=gvisor CODECAGE_TEST_ENVIRONMENT=image go test -count=1 -timeout 20m "$@" \
	-run 'Containment' -skip '^TestContainment_NoLeftovers$' ./internal/service/
# The functional suite, the containment rows and sessions again, against the
# gVisor backend (every run under runsc).
CODECAGE_TEST_BACKEND=gvisor go test -count=1 -timeout 30m "$@" \
	-run 'Containment|^Test(Budget|Stdout|LastExpression|Variables|Exception|SyntaxError|Unicode|NULBytes|OneMegabyte|BadRequests|WallClock|CPUTime|OOM|OutputTruncation|SysExit|ImportPolicy|ResultReports|ConcurrentExecutions|Cancellation|Deadline|Forged|ProcHas|Session|FileAPI|PipInstallFromWheelhouse|NetworkProfile|ProfilesAllow|EnabledProfiles|EveryBasicModule|NumpyAndPandas|PlotComesBack|Validate|RunCommand)' \
	./internal/service/
