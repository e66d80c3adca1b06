#!/usr/bin/env bash
# Installs the npm packages a suite's package-lock.json pins (npm ci), once
# per lock file: they are kept in ~/.cache/codecage/npm/<dir>-<hash of the
# lock> and linked as DIR/node_modules, so the E2B and MCP SDKs are not
# installed again by every run (scripts/test.sh runs several suites).
set -euo pipefail
dir=$1
key=$(cat "$dir/package.json" "$dir/package-lock.json" | sha256sum | cut -c1-16)
base="${XDG_CACHE_HOME:-$HOME/.cache}/codecage/npm"
cache="$base/$(basename "$dir")-$key"
if [ ! -d "$cache/node_modules" ]; then
	mkdir -p "$base"
	tmp=$(mktemp -d "$cache.XXXXXX")
	trap 'rm -rf "$tmp"' EXIT
	cp "$dir/package.json" "$dir/package-lock.json" "$tmp/"
	(cd "$tmp" && npm ci --no-audit --no-fund --silent --prefer-offline 2>&1 | grep -v '^npm warn' || true)
	[ -d "$tmp/node_modules" ] || { echo "npm-deps: npm ci failed in $dir" >&2; exit 1; }
	# Another run may have finished first: either copy is the same.
	mv -T "$tmp" "$cache" 2>/dev/null || true
fi
# A directory installed in place before is replaced by the link.
[ -L "$dir/node_modules" ] || rm -rf "$dir/node_modules"
ln -sfn "$cache/node_modules" "$dir/node_modules"
