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
	'value: "http://$(POD_IP):8001"' 'procMount: Unmasked' 'type: Unconfined' 'name: t-codecage-postgres' \
	'hostUsers: false' 'name: SANDBOX_REQUIRE_USER_NAMESPACE' 'terminationMessagePolicy: FallbackToLogsOnError'; do
	grep -qF -- "$want" "$out" || { echo "helm template: no '$want' in the rendered chart" >&2; exit 1; }
done
# No tier asks for a privileged pod, or even names it.
if grep -qE 'privileged|add:|runtimeClassName' "$out"; then
	echo "helm template: the default tier names privileged mode, adds capabilities or sets a runtime class" >&2
	exit 1
fi

# The baseline tier: exactly the six capabilities, Localhost profiles,
# nothing Unconfined; without AppArmor, no AppArmor profile at all.
"$helm" lint --strict "$chart" "${values[@]}" --set postgres.deploy=true -f "$chart/values-baseline.yaml"
"$helm" template t "$chart" "${values[@]}" --set postgres.deploy=true -f "$chart/values-baseline.yaml" \
	--set runtimeClassName=codecage >"$out"
for want in 'drop:
              - ALL' 'add:
              - SETUID
              - SETGID
              - SETFCAP
              - CHOWN
              - FOWNER
              - DAC_OVERRIDE' 'allowPrivilegeEscalation: false' 'localhostProfile: codecage.json' \
	'localhostProfile: codecage
' 'runtimeClassName: codecage' 'procMount: Unmasked' 'hostUsers: false'; do
	grep -qzF -- "$want" "$out" || { echo "helm template (baseline): no '$want' in the rendered chart" >&2; exit 1; }
done
if grep -v '^ *#' "$out" | grep -qE 'privileged|Unconfined|SYS_ADMIN'; then
	echo "helm template (baseline): privileged, Unconfined or SYS_ADMIN in the rendered chart" >&2
	exit 1
fi
"$helm" template t "$chart" "${values[@]}" --set postgres.deploy=true -f "$chart/values-baseline.yaml" \
	--set securityContext.appArmorProfile=null >"$out"
if grep -q 'appArmorProfile' "$out"; then
	echo "helm template (baseline): appArmorProfile=null still renders one" >&2
	exit 1
fi
# Without a user namespace nothing requires one.
"$helm" template t "$chart" "${values[@]}" --set postgres.deploy=true --set hostUsers=true \
	--set securityContext.procMount=Default >"$out"
if grep -q 'SANDBOX_REQUIRE_USER_NAMESPACE' "$out"; then
	echo "helm template: hostUsers=true still requires a user namespace" >&2
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
