#!/usr/bin/env bash
# go test -exec wrapper (scripts/test.sh): each test binary gets a
# temporary directory and state directory of its own, so packages run side
# by side without sharing a state directory (workspaces, snapshots, parked
# sessions, environments) and a test that judges the host's mounts can
# tell its own from another package's.
set -u
base="${TMPDIR:-/tmp}"
dir=$(mktemp -d "$base/codecage-test.XXXXXX") || exit 1
chmod 1777 "$dir" # like /tmp: tests hand directories to sandbox uids
TMPDIR="$dir" XDG_STATE_HOME="$dir/state" "$@"
rc=$?
# A mount a test left is a leftover its own checks report; never follow it.
rm -rf --one-file-system "$dir" 2>/dev/null
exit $rc
