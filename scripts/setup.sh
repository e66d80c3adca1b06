#!/usr/bin/env bash
# Sets up a Debian machine for codecage and builds bin/codecage.
# Idempotent: packages already installed are not fetched again.
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(python3)

missing=()
for p in "${packages[@]}"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
	sudo=""
	[ "$(id -u)" -eq 0 ] || sudo="sudo"
	$sudo apt-get update -qq
	DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}"
fi

if ! command -v go >/dev/null; then
	if [ -x /usr/local/go/bin/go ]; then
		export PATH="/usr/local/go/bin:$PATH"
	else
		echo "setup: Go 1.26 or newer is required (https://go.dev/dl/)" >&2
		exit 1
	fi
fi

mkdir -p bin
go build -o bin/codecage ./cmd/codecage
bin/codecage doctor
