#!/usr/bin/env bash
# Sets up a Debian machine for codecage and builds bin/codecage.
# Idempotent: packages already installed are not fetched again.
set -euo pipefail
cd "$(dirname "$0")/.."

sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"

# python3 runs the code (python3-pip runs pip_install, in a jail); numpy to
# sklearn are the data_science profile, requests the network profile;
# cloudpickle saves a native session's globals (snapshots); runsc is gVisor,
# the second backend (use_container, SANDBOX_ISOLATION=gvisor); nodejs runs
# the JavaScript and TypeScript kernels (SANDBOX_KERNELS; Debian 12's 18 is enough).
# mmdebstrap builds environments from Debian packages, buildah from a
# Dockerfile, its RUN steps under runc (crun refuses cgroups v1 beside v2).
packages=(python3 python3-pip python3-numpy python3-pandas python3-scipy python3-matplotlib python3-sympy python3-sklearn python3-requests python3-cloudpickle nodejs runsc mmdebstrap buildah runc)

missing=()
for p in "${packages[@]}"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
	$sudo apt-get update -qq
	DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}"
fi

# matplotlib's font cache, built once: every sandbox binds it read-only
# (building it inside a fresh sandbox costs most of a second per run).
mpl=/var/cache/codecage/matplotlib
if ! compgen -G "$mpl/fontlist-*.json" >/dev/null; then
	$sudo mkdir -p "$mpl"
	$sudo env MPLCONFIGDIR="$mpl" /usr/bin/python3 -I -c 'import matplotlib.font_manager'
	$sudo chmod -R a+rX /var/cache/codecage
fi

if ! command -v go >/dev/null; then
	if [ -x /usr/local/go/bin/go ]; then
		export PATH="/usr/local/go/bin:$PATH"
	else
		echo "setup: Go 1.26 or newer is required (https://go.dev/dl/)" >&2
		exit 1
	fi
fi

# A current gVisor: Debian's runsc (2022) has only the slow ptrace platform
# and maps code from noexec mounts. runsc builds from the Go module proxy;
# it must be static (the sandbox re-executes it after pivot_root, where
# there is no dynamic loader). codecage prefers this one to runsc on PATH;
# Debian's (above) stays the fallback when the build fails.
runsc_version=v0.0.0-20260905035102-160fafc42237
runsc_bin=/usr/local/lib/codecage/runsc
if [ "$("$runsc_bin" --version 2>/dev/null | head -n1)" != "runsc version $runsc_version" ]; then
	echo "setup: building runsc $runsc_version (about 2 minutes)" >&2
	gobin=$(mktemp -d)
	if (cd "$gobin" && GOBIN="$gobin" GOFLAGS=-mod=mod CGO_ENABLED=0 go install \
		-ldflags "-s -w -X gvisor.dev/gvisor/runsc/version.version=$runsc_version" \
		"gvisor.dev/gvisor/runsc@$runsc_version"); then
		$sudo install -D -m 0755 "$gobin/runsc" "$runsc_bin"
	else
		echo "setup: building runsc $runsc_version failed; codecage falls back to Debian's runsc ($(runsc --version 2>/dev/null | head -n1), ptrace only)" >&2
	fi
	rm -rf "$gobin"
fi

scripts/build.sh
bin/codecage doctor
