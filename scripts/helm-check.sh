#!/usr/bin/env bash
# Lints and renders the Helm chart (deploy/helm/codecage) offline: with the
# values a deployment gives, and without the required ones, which must be
# refused with a message naming them. helm is built from the Go module
# proxy once (~2 minutes) into $(go env GOPATH)/bin.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v go >/dev/null || export PATH="/usr/local/go/bin:$PATH"
helm="$(go env GOPATH)/bin/helm"
if ! [ -x "$helm" ] || ! "$helm" version --short 2>/dev/null | grep -q '^v3\.22\.0'; then
	GOFLAGS= CGO_ENABLED=0 go install helm.sh/helm/v3/cmd/helm@v3.22.0
fi
chart=deploy/helm/codecage
values=(--set apiKeys=ops:0123456789abcdef0123 --set peerSecret=0123456789abcdef-peer)

"$helm" lint --strict "$chart" "${values[@]}" --set postgres.url=postgres://u:p@db:5432/codecage
"$helm" lint --strict "$chart" "${values[@]}" --set postgres.deploy=true

out="$(mktemp)"
trap 'rm -f "$out"' EXIT
"$helm" template t "$chart" "${values[@]}" --set postgres.deploy=true --set replicaCount=3 \
	--set snapshotSecret=0123456789abcdef0123456789abcdef-snap >"$out"
for want in 'kind: Deployment' 'replicas: 3' 'path: /ready' 'path: /health' 'terminationGracePeriodSeconds: 80' \
	'name: SANDBOX_SNAPSHOT_SECRET' 'snapshot-secret: "0123456789abcdef0123456789abcdef-snap"' \
	'value: "http://$(POD_IP):8001"' 'procMount: Unmasked' 'type: Unconfined' 'name: t-codecage-postgres'; do
	grep -qF -- "$want" "$out" || { echo "helm template: no '$want' in the rendered chart" >&2; exit 1; }
done
if grep -qE 'privileged: true|add:' "$out"; then
	echo "helm template: the chart asks for privileged mode or added capabilities" >&2
	exit 1
fi

# Required values are refused, by name.
for missing in "apiKeys" "peerSecret" "postgres.url"; do
	args=(--set apiKeys=ops:0123456789abcdef0123 --set peerSecret=0123456789abcdef-peer --set postgres.url=postgres://db/x)
	case $missing in
	apiKeys) args[1]=apiKeys= ;;
	peerSecret) args[3]=peerSecret= ;;
	postgres.url) args[5]=postgres.url= ;;
	esac
	if msg="$("$helm" template t "$chart" "${args[@]}" 2>&1)"; then
		echo "helm template: rendered without $missing" >&2
		exit 1
	fi
	grep -q "$missing" <<<"$msg" || { echo "helm template: the error without $missing does not name it: $msg" >&2; exit 1; }
done
echo "helm-check: chart lints and renders"
