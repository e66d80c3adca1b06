#!/usr/bin/env bash
# End to end on a real Kubernetes: a one-node cluster built from source
# (scripts/e2e-k8s/: Kubernetes v1.34.4, the last whose kubelet accepts
# this host's cgroup v1; containerd v2.4.2 and runc v1.4.4, which give pods
# user namespaces) in a network namespace of its own; the codecage image and
# a PostgreSQL image built without a registry (scripts/build-image.sh); the
# Helm chart with its own defaults: no privileged pod (the API server admits
# none), a user namespace per pod, no added capabilities. Then, with the
# official MCP TypeScript client and plain HTTP (e2e/ts-client/k8s.mjs):
#   - each pod runs in a user namespace of its own (judged from the host: its
#     processes' uids, its uid_map) and codecage doctor says so;
#   - runs through the Service (kube-proxy, iptables) reach all 3 replicas;
#   - a session made through the Service keeps its state over 20 calls that
#     land on every replica, files included;
#   - every replica's audit rows are in the one PostgreSQL;
#   - deleting the pod that holds a session makes it "session lost"; the
#     other sessions work on;
#   - scaling 3 -> 2 drains the removed replica (runs in flight answered)
#     and leaves none of its processes on the node;
#   - the baseline tier (values-baseline.yaml: drop ALL plus six
#     capabilities, the Localhost seccomp profile deploy/seccomp/codecage.json)
#     is admitted where Pod Security "baseline" is enforced, the default tier
#     is not; the tier runs sessions, a command and a drain that parks a
#     session (resumed by another replica) under a copy of the profile that
#     logs (SCMP_ACT_LOG) what the profile would refuse: nothing is logged;
#   - negative cases fail at start and say why: hostUsers: true with an
#     unmasked /proc (the API server), a node whose runtime has no user
#     namespaces (a RuntimeClass on Debian's runc 1.1.5: the kubelet), a pod
#     on the host's ids with a masked /proc, and one without capabilities
#     (codecage serve refuses with codecage doctor's FAIL lines).
# Not testable here: cgroup v2 delegation (cgroup_writable; this host is
# cgroup v1), AppArmor (no LSM), gVisor in a pod (it needs the cgroups).
# Builds are cached in /var/cache/codecage-e2e (cold: ~25 min of Kubernetes,
# containerd and runc builds, ~6 min of images; warm: ~2 min in all).
# Everything it starts is stopped on exit. Not part of scripts/test.sh.
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
peer="$(head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n')"
E2E_NODE=e2e-node

say "the node: user namespaces per runtime handler"
kubectl get node "$E2E_NODE" -o jsonpath='{range .status.runtimeHandlers[*]}{.name}={.features.userNamespaces}{"\n"}{end}' | tee /dev/stderr >"$out/handlers"
grep -qx 'runc=true' "$out/handlers" || { echo "the node's runc handler does not offer user namespaces" >&2; exit 1; }
grep -qx 'runc-debian=false' "$out/handlers" || { echo "runc-debian (runc 1.1.5) should offer no user namespaces" >&2; exit 1; }
kubectl apply -f - <<EOF
apiVersion: node.k8s.io/v1
kind: RuntimeClass
metadata: {name: runc-debian}
handler: runc-debian
EOF

say "helm install: the chart's defaults (own user namespace, unmasked /proc, no added capabilities), 3 replicas and a PostgreSQL"
# The node has 2 cores: smaller requests. Nothing about privileges is set.
"$helm" install cc deploy/helm/codecage --wait --timeout 5m \
	--set replicaCount=3 --set image.tag=dev --set postgres.deploy=true \
	--set apiKeys="e2e:$key" --set peerSecret="$peer" \
	--set shutdownGraceSeconds=20 --set resources.requests.cpu=500m \
	--set resources.requests.memory=512Mi
kubectl get pods -o wide
if kubectl get pods -o yaml | grep -q privileged; then echo "a pod names privileged" >&2; exit 1; fi

# server_pid POD_UID: the host pid of the codecage server of that pod.
server_pid() {
	local p
	for p in $(grep -l "pod$1" /proc/[0-9]*/cgroup 2>/dev/null | cut -d/ -f3); do
		[ "$(cat "/proc/$p/comm" 2>/dev/null)" = codecage ] && [ "$(awk '{print $4}' "/proc/$p/stat")" != 0 ] || continue
		# the server, not a sandbox init: its parent is tini
		[ "$(cat "/proc/$(awk '{print $4}' "/proc/$p/stat")/comm" 2>/dev/null)" = tini ] && { echo "$p"; return; }
	done
	return 1
}
say "each pod in a user namespace of its own (judged from the host), and codecage doctor says so"
declare -A idbase
for pod in $(kubectl get pods -l app.kubernetes.io/component=server -o jsonpath='{range .items[*]}{.metadata.name}={.metadata.uid}{" "}{end}'); do
	name=${pod%%=*} uid=${pod#*=}
	pid=$(server_pid "$uid") || { echo "no server process of pod $name on the node" >&2; exit 1; }
	read -r inside outside count < "/proc/$pid/uid_map"
	hostuid=$(awk '/^Uid:/ {print $2}' "/proc/$pid/status")
	echo "pod $name: server pid $pid runs as host uid $hostuid; its uid_map: $inside $outside $count"
	if [ "$inside" != 0 ] || [ "$outside" = 0 ] || [ "$count" -gt 1048576 ] || [ "$hostuid" != "$outside" ]; then
		echo "pod $name is not in a user namespace of its own" >&2; exit 1
	fi
	idbase[$uid]=$outside
	doc=$(kubectl exec "$name" -- codecage doctor 2>&1) || { echo "$doc" >&2; exit 1; }
	for want in "ok    own user namespace ids 0-65535 onto host ids $outside-" "ok    sandbox" "from 32768 (32766 of them)" "warn  cgroups"; do
		grep -qF -- "$want" <<<"$doc" || { echo "codecage doctor in $name: no '$want':" >&2; echo "$doc" >&2; exit 1; }
	done
done
kubectl exec "$name" -- codecage doctor | sed 's/^/    /'
svc="http://$(kubectl get svc cc-codecage -o jsonpath='{.spec.clusterIP}'):8001"
# kube-proxy writes the Service's rules a moment after the pods are ready:
# wait until the Service ($svc) has reached all three.
wait_spread() {
	local seen
	for _ in $(seq 120); do
		seen=$(for _ in $(seq 12); do curl -s -o /dev/null -D - -H "Authorization: Bearer $key" "$svc/info" | tr -d '\r' | sed -n 's/^[Xx]-[Cc]odecage-[Rr]eplica: //p'; done | sort -u | wc -l)
		[ "$seen" -ge 3 ] && return
		sleep 0.5
	done
}
wait_spread
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
# No process on the node runs with a host uid of a removed pod's range
# (its sandboxes ran as ids 32768+ of it), nor outside the pod's cgroup
# with one of a remaining pod's.
uids=$(kubectl get pods -l app.kubernetes.io/component=server -o jsonpath='{.items[*].metadata.uid}')
for p in /proc/[0-9]*; do
	u=$(awk '/^Uid:/ {print $2}' "$p/status" 2>/dev/null || true)
	[ -n "$u" ] || continue
	for poduid in "${!idbase[@]}"; do
		b=${idbase[$poduid]}
		[ "$u" -ge "$b" ] && [ "$u" -lt $((b + 65536)) ] || continue
		grep -qw "$poduid" <<<"$uids" && grep -q "pod$poduid" "$p/cgroup" 2>/dev/null && continue
		echo "process ${p#/proc/} (host uid $u, of pod $poduid's ids) is left outside a running pod" >&2
		exit 1
	done
done
echo "no process of a removed pod's ids is left; the 2 remaining pods' all run in their pods"
say "the baseline tier: admitted where Pod Security baseline is enforced; the default tier is not"
kubectl create namespace baseline
kubectl label namespace baseline pod-security.kubernetes.io/enforce=baseline pod-security.kubernetes.io/enforce-version=latest
seccomp_dir=$(scripts/e2e-k8s/cluster.sh env | sed -n 's/^export E2E_KUBELET_DIR=//p')/seccomp
mkdir -p "$seccomp_dir"
cp deploy/seccomp/codecage.json "$seccomp_dir/codecage.json"
# The recording copy: what the profile would refuse is logged instead.
/usr/bin/python3 -c 'import json,sys; p=json.load(open(sys.argv[1])); p["defaultAction"]="SCMP_ACT_LOG"; p.pop("defaultErrnoRet",None); json.dump(p,open(sys.argv[2],"w"))' \
	deploy/seccomp/codecage.json "$seccomp_dir/codecage-log.json"
small=(--set apiKeys="e2e:$key" --set peerSecret="$peer" --set image.tag=dev --set resources.requests.cpu=10m --set resources.requests.memory=64Mi)
"$helm" install refused deploy/helm/codecage -n baseline --set replicaCount=1 --set postgres.url=postgres://x@127.0.0.1:1/x "${small[@]}"
for _ in $(seq 120); do
	why=$(kubectl -n baseline get rs -l app.kubernetes.io/instance=refused -o jsonpath='{.items[*].status.conditions[*].message}')
	[ -n "$why" ] && break
	sleep 0.5
done
echo "the default tier in the baseline namespace: $why"
grep -q 'violates PodSecurity "baseline:latest"' <<<"$why" || { echo "the default tier was not refused by Pod Security baseline" >&2; exit 1; }
[ -z "$(kubectl -n baseline get pods -l app.kubernetes.io/instance=refused -o name)" ] || { echo "a pod of the default tier exists in the baseline namespace" >&2; exit 1; }
"$helm" uninstall refused -n baseline --wait
# Room on the node's 2 cores for the next install.
"$helm" uninstall cc --wait

say "the baseline tier: 3 replicas under the recording seccomp profile (SCMP_ACT_LOG)"
ratelimit=$(sysctl -n kernel.printk_ratelimit)
trap 'sysctl -qw kernel.printk_ratelimit='"$ratelimit"'; say "teardown"; scripts/e2e-k8s/cluster.sh down; scripts/e2e-k8s/cluster.sh verify-down' EXIT
sysctl -qw kernel.printk_ratelimit=0 # every logged call reaches the kernel log
# Kernel log times (seconds since boot), not line counts: the ring is full.
since=$(awk '{print $1}' /proc/uptime)
"$helm" install cb deploy/helm/codecage -n baseline --wait --timeout 5m -f deploy/helm/codecage/values-baseline.yaml \
	--set securityContext.appArmorProfile=null \
	--set podSecurityContext.seccompProfile.localhostProfile=codecage-log.json \
	--set securityContext.seccompProfile.localhostProfile=codecage-log.json \
	--set replicaCount=3 --set image.tag=dev --set postgres.deploy=true \
	--set apiKeys="e2e:$key" --set peerSecret="$peer" --set snapshotSecret="$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')" \
	--set shutdownGraceSeconds=20 --set resources.requests.cpu=500m --set resources.requests.memory=512Mi
kubectl -n baseline get pods -o wide
for pod in $(kubectl -n baseline get pods -l app.kubernetes.io/component=server -o jsonpath='{range .items[*]}{.metadata.name}={.metadata.uid}{" "}{end}'); do
	name=${pod%%=*} uid=${pod#*=}
	pid=$(server_pid "$uid") || { echo "no server process of pod $name on the node" >&2; exit 1; }
	st=$(grep -E '^(CapEff|NoNewPrivs|Seccomp):' "/proc/$pid/status" | tr -s '\t ' ' ' | tr '\n' ' ')
	echo "pod $name: server pid $pid: $st"
	# CHOWN(0) DAC_OVERRIDE(1) FOWNER(3) SETGID(6) SETUID(7) SETFCAP(31), no_new_privs, a filter.
	[ "$st" = "CapEff: 00000000800000cb NoNewPrivs: 1 Seccomp: 2 " ] || { echo "pod $name is not confined as the baseline tier says" >&2; exit 1; }
	doc=$(kubectl -n baseline exec "$name" -- codecage doctor 2>&1) || { echo "$doc" >&2; exit 1; }
	grep -q '^FAIL' <<<"$doc" && { echo "$doc" >&2; exit 1; }
done
svc="http://$(kubectl -n baseline get svc cb-codecage -o jsonpath='{.spec.clusterIP}'):8001"
wait_spread
client spread
main=$(client session | sed -n 's/^SESSIONS //p' | node -e 'let s="";process.stdin.on("data",d=>s+=d).on("end",()=>console.log(JSON.parse(s).main))')
# A drain with a snapshot secret parks the pod's sessions: another replica
# resumes them.
pg_ip=$(kubectl -n baseline get pod -l app.kubernetes.io/component=postgres -o jsonpath='{.items[0].status.podIP}')
holder=$(psql -qAt "postgres://codecage:codecage@$pg_ip:5432/codecage?sslmode=disable" -c "SELECT name FROM codecage_replicas WHERE id = '${main##*-}'")
echo "session $main is held by pod $holder: deleting it"
kubectl -n baseline delete pod "$holder" --wait=true
client parked "$main"
# A shell command in a sandbox of its own.
ran=$(curl -sf -H "Authorization: Bearer $key" "$svc/commands" -d '{"command":"ls /usr/bin | wc -l; echo done > f; cat f"}')
grep -q '"exit_code":0' <<<"$ran" || { echo "a command under the baseline tier: $ran" >&2; exit 1; }
# What the profile would have refused, by name: must be nothing.
logged_since() {
	dmesg | awk -v t="$1" 'match($0, /^\[ *[0-9.]+\]/) && /type=1326/ && /code=0x7ffc0000/ {
		if (substr($0, 2, RLENGTH - 2) + 0 > t && match($0, /syscall=[0-9]+/)) print substr($0, RSTART + 8, RLENGTH - 8) }' | sort -un
}
logged=$(logged_since "$since")
if [ -n "$logged" ]; then
	for n in $logged; do
		echo "the baseline tier made system call $n ($(awk -v n="$n" '$1 == "#define" && $3 == n {sub("__NR_", "", $2); print $2}' /usr/include/x86_64-linux-gnu/asm/unistd_64.h)), which deploy/seccomp/codecage.json refuses" >&2
	done
	exit 1
fi
echo "deploy/seccomp/codecage.json allowed every system call the baseline tier made (none logged)"
# The control: a call the profile refuses (acct, 163) is logged.
control=$(awk '{print $1}' /proc/uptime)
kubectl -n baseline exec "$name" -- /usr/bin/python3 -c 'import ctypes; ctypes.CDLL(None).syscall(163, 0)'
for _ in $(seq 40); do grep -qx 163 <<<"$(logged_since "$control")" && break; sleep 0.25; done
grep -qx 163 <<<"$(logged_since "$control")" || { echo "the recording profile logged nothing for acct(2): the recording does not work" >&2; exit 1; }
echo "the control: acct(2), which the profile refuses, was logged"
"$helm" uninstall cb -n baseline --wait

say "negative cases: each fails at start, saying why"
# hostUsers: true with an unmasked /proc: the API server refuses it.
if msg=$("$helm" template n1 deploy/helm/codecage --set hostUsers=true --set postgres.url=postgres://x@127.0.0.1:1/x "${small[@]}" |
	kubectl apply --dry-run=server -f - 2>&1); then
	echo "the API server accepted procMount: Unmasked with hostUsers: true" >&2; exit 1
fi
grep -q 'hostUsers' <<<"$msg" || { echo "unexpected refusal: $msg" >&2; exit 1; }
echo "hostUsers: true with procMount: Unmasked: $(grep -o 'procMount.*' <<<"$msg" | head -1)"
# wait_message RELEASE JSONPATH PATTERN: until the release's pod shows it.
wait_message() {
	local m=""
	for _ in $(seq 180); do
		m=$(kubectl get pods -l app.kubernetes.io/instance="$1" -o jsonpath="$2" 2>/dev/null || true)
		grep -q -- "$3" <<<"$m" && { printf '%s\n' "$m"; return; }
		sleep 0.5
	done
	echo "release $1: no '$3' in: $m" >&2
	kubectl describe pods -l app.kubernetes.io/instance="$1" >&2
	return 1
}
never_ready() {
	[ "$(kubectl get pods -l app.kubernetes.io/instance="$1" -o jsonpath='{.items[*].status.containerStatuses[*].ready}')" != true ] ||
		{ echo "release $1 became ready" >&2; exit 1; }
}
neg=(--set replicaCount=1 --set postgres.url=postgres://x@127.0.0.1:1/x "${small[@]}")
# A node whose runtime has no user namespaces: the kubelet refuses the pod.
"$helm" install n2 deploy/helm/codecage --set runtimeClassName=runc-debian "${neg[@]}"
pod=$(kubectl get pods -l app.kubernetes.io/instance=n2 -o jsonpath='{.items[0].metadata.name}')
for _ in $(seq 120); do
	m=$(kubectl get events --field-selector involvedObject.name="$pod" -o jsonpath='{.items[*].message}')
	grep -qi 'user namespace' <<<"$m" && break
	sleep 0.5
done
grep -qi 'user namespace' <<<"$m" || { echo "no event about user namespaces for $pod: $m" >&2; exit 1; }
echo "a node without user namespaces: $m" | head -c 400; echo
never_ready n2
# Such a node's fallback, the host's ids and a masked /proc: serve refuses.
"$helm" install n3 deploy/helm/codecage --set hostUsers=true --set securityContext.procMount=Default "${neg[@]}"
wait_message n3 '{.items[0].status.containerStatuses[0].lastState.terminated.message}{.items[0].status.containerStatuses[0].state.terminated.message}' 'FAIL  sandbox' |
	grep -q 'procMount: Unmasked' || { echo "n3: the refusal does not name procMount: Unmasked" >&2; exit 1; }
never_ready n3
echo "the host's ids and a masked /proc: codecage serve refused at start, naming procMount: Unmasked"
# No capabilities: serve refuses, naming them.
"$helm" install n4 deploy/helm/codecage --set 'securityContext.capabilities.drop={ALL}' "${neg[@]}"
wait_message n4 '{.items[0].status.containerStatuses[0].lastState.terminated.message}{.items[0].status.containerStatuses[0].state.terminated.message}' 'FAIL  capabilities' |
	grep -q 'missing CAP_SETUID, CAP_SETGID, CAP_SETFCAP, CAP_CHOWN, CAP_FOWNER, CAP_DAC_OVERRIDE' ||
	{ echo "n4: the refusal does not name the capabilities" >&2; exit 1; }
never_ready n4
echo "no capabilities: codecage serve refused at start, naming the six it needs"
for r in n2 n3 n4; do "$helm" uninstall "$r" --wait; done

say "e2e-k8s: all checks passed"
