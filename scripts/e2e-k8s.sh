#!/usr/bin/env bash
# End to end on a real Kubernetes: a one-node cluster built from source
# (scripts/e2e-k8s/: v1.34.4, containerd, kube-proxy, CoreDNS) in a network
# namespace of its own; the codecage image and a PostgreSQL image built
# without a registry (scripts/build-image.sh); the Helm chart with 3
# replicas; then, with the official MCP TypeScript client and plain HTTP
# (e2e/ts-client/k8s.mjs):
#   - runs through the Service (kube-proxy, iptables) reach all 3 replicas;
#   - a session made through the Service keeps its state over 20 calls that
#     land on every replica, files included;
#   - every replica's audit rows are in the one PostgreSQL;
#   - deleting the pod that holds a session makes it "session lost"; the
#     other sessions work on;
#   - scaling 3 -> 2 drains the removed replica (runs in flight answered)
#     and leaves none of its processes on the node.
# Builds are cached in /var/cache/codecage-e2e (cold: ~20 min of Kubernetes
# build, ~6 min of images; warm: ~2 min in all). Everything it starts is
# stopped on exit. Not part of scripts/test.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v go >/dev/null || export PATH="/usr/local/go/bin:$PATH"
cache=/var/cache/codecage-e2e
out=$cache/out
mkdir -p "$out"
say() { printf '\n== %s\n' "$*"; }

say "build: Kubernetes, images, helm, the TypeScript client (cached)"
scripts/e2e-k8s/build.sh
command -v mmdebstrap >/dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq mmdebstrap >/dev/null; }
scripts/build-image.sh "$out/codecage.tar"
scripts/build-image.sh --postgres "$out/postgres.tar"
scripts/helm-check.sh >/dev/null
helm="$(go env GOPATH)/bin/helm"
scripts/npm-deps.sh e2e/ts-client

trap 'say "teardown"; scripts/e2e-k8s/cluster.sh down; scripts/e2e-k8s/cluster.sh verify-down' EXIT
say "cluster up"
scripts/e2e-k8s/cluster.sh up
eval "$(scripts/e2e-k8s/cluster.sh env)"
scripts/e2e-k8s/cluster.sh load "$out/codecage.tar"
scripts/e2e-k8s/cluster.sh load "$out/postgres.tar"

key="e2e-$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')"
say "helm install: 3 replicas and a PostgreSQL"
# This node's containerd (1.6) cannot give a pod a user namespace, so the
# chart's default (hostUsers: false, procMount: Unmasked, seccomp
# Unconfined) is refused here; privileged is the only way to an unmasked
# /proc on it. docs/deploy.md says so. The node has 2 cores: smaller requests.
"$helm" install cc deploy/helm/codecage --wait --timeout 5m \
	--set replicaCount=3 --set image.tag=dev --set postgres.deploy=true \
	--set apiKeys="e2e:$key" --set peerSecret="$(head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n')" \
	--set hostUsers=true --set securityContext.privileged=true --set securityContext.procMount=Default \
	--set shutdownGraceSeconds=20 --set resources.requests.cpu=500m \
	--set resources.requests.memory=512Mi
kubectl get pods -o wide
svc="http://$(kubectl get svc cc-codecage -o jsonpath='{.spec.clusterIP}'):8001"
# kube-proxy writes the Service's rules a moment after the pods are ready:
# wait until the Service has reached all three.
for _ in $(seq 120); do
	seen=$(for _ in $(seq 12); do curl -s -o /dev/null -D - -H "Authorization: Bearer $key" "$svc/info" | tr -d '\r' | sed -n 's/^[Xx]-[Cc]odecage-[Rr]eplica: //p'; done | sort -u | wc -l)
	[ "$seen" -ge 3 ] && break
	sleep 0.5
done
pg_ip=$(kubectl get pod -l app.kubernetes.io/component=postgres -o jsonpath='{.items[0].status.podIP}')
psql_() { psql -qAt "postgres://codecage:codecage@$pg_ip:5432/codecage?sslmode=disable" -c "$1"; }
client() { node e2e/ts-client/k8s.mjs "$1" "$svc" "$key" "${@:2}"; }

say "requests spread over the replicas (the Service, through kube-proxy)"
client spread

say "a session through the Service, 20 calls over every replica, files"
sessions=$(client session | tee >(cat >&2) | sed -n 's/^SESSIONS //p')
main=$(node -e 'console.log(JSON.parse(process.argv[1]).main)' "$sessions")
others=$(node -e 'console.log(JSON.parse(process.argv[1]).others.join(" "))' "$sessions")

say "audit rows of every replica in PostgreSQL"
psql_ "SELECT replica, count(*) FROM codecage_audit_events GROUP BY replica ORDER BY replica" | tee >(cat >&2) |
	awk -F'|' '$1 != "" && $2 > 0 { n++ } END { if (n < 3) { print "audit rows from " n " replicas, want 3" > "/dev/stderr"; exit 1 } }'

say "per-pod memory with warm pools (the chart's sizing)"
for uid in $(kubectl get pods -l app.kubernetes.io/component=server -o jsonpath='{.items[*].metadata.uid}'); do
	d=$(find /sys/fs/cgroup/memory -maxdepth 6 -type d -name "pod$uid" 2>/dev/null | head -1)
	[ -n "$d" ] && echo "pod $uid: $(($(cat "$d/memory.usage_in_bytes") >> 20)) MiB"
done

say "delete the pod that holds the session"
holder=$(psql_ "SELECT name FROM codecage_replicas WHERE id = '${main##*-}'")
echo "session $main is held by pod $holder"
kubectl delete pod "$holder" --wait=true
client lost "$main" $others

say "scale 3 -> 2 with runs in flight"
kubectl rollout status deploy/cc-codecage --timeout 3m
before=$(kubectl get pods -l app.kubernetes.io/component=server -o jsonpath='{range .items[*]}{.metadata.name}={.metadata.uid}={.status.podIP}{"\n"}{end}')
urls=$(awk -F= '{print "http://" $3 ":8001"}' <<<"$before")
client inflight $urls &
runs=$!
sleep 2
kubectl scale deploy/cc-codecage --replicas=2
wait "$runs"
# Until the removed pod is gone altogether (a terminating pod is still listed).
for _ in $(seq 120); do
	[ "$(kubectl get pods -l app.kubernetes.io/component=server --no-headers | wc -l)" -eq 2 ] && break
	sleep 1
done
after=$(kubectl get pods -l app.kubernetes.io/component=server -o jsonpath='{range .items[*]}{.metadata.name}{"\n"}{end}')
[ "$(wc -l <<<"$after")" -eq 2 ] || { echo "the scale-down left: $after" >&2; exit 1; }
while IFS='=' read -r name uid _; do
	grep -qx "$name" <<<"$after" && continue
	left=$(grep -l "pod$uid" /proc/[0-9]*/cgroup 2>/dev/null || true)
	if [ -n "$left" ]; then
		echo "processes of the removed pod $name are left on the node: $left" >&2
		exit 1
	fi
	echo "removed pod $name: gone, no process of it left on the node"
done <<<"$before"
# Every sandbox process still on the node belongs to a remaining pod.
uids=$(kubectl get pods -l app.kubernetes.io/component=server -o jsonpath='{.items[*].metadata.uid}')
for p in /proc/[0-9]*; do
	u=$(awk '/^Uid:/ {print $2}' "$p/status" 2>/dev/null || true)
	[ -n "$u" ] && [ "$u" -ge 1500000000 ] || continue
	ok=""
	for uid in $uids; do grep -q "pod$uid" "$p/cgroup" 2>/dev/null && ok=1; done
	[ -n "$ok" ] || { echo "sandbox process ${p#/proc/} (uid $u) belongs to no running pod" >&2; exit 1; }
done
echo "sandbox processes on the node all belong to the 2 remaining pods"
say "e2e-k8s: all checks passed"
