#!/usr/bin/env bash
# smoke.sh — proves a running cluster (cluster.sh up) does what codecage's e2e
# test needs: Deployment + ClusterIP Service load-balancing over kube-proxy,
# pod IPs reachable from the host and from inside the node netns, cluster
# DNS, kubectl exec, pod replacement, scaling, a StatefulSet, and the
# securityContext settings a sandbox pod may ask for. Leaves the cluster running but cleans its objects.
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
eval "$("$HERE/cluster.sh" env)"
. "$HERE/common.sh"
NS=smoke
k() { kubectl -n "$NS" "$@"; }

# GET URL from inside the node netns (curl's --noproxy: no proxies here)
kget() { kexec curl -sS --noproxy '*' --max-time 3 "$1"; }
# GET URL straight from the host (routed through the host veth)
hget() { curl -sS --noproxy '*' --max-time 3 "$1"; }

ready_pods() { k get pods -l app=hostname -o jsonpath='{range .items[?(@.status.phase=="Running")]}{.metadata.name}{" "}{.status.podIP}{"\n"}{end}'; }
wait_count() { # N: wait until exactly N Running+Ready hostname pods and nothing terminating
  local n=$1 end=$((SECONDS + 90))
  until [ "$(k get pods -l app=hostname --no-headers 2>/dev/null | grep -c ' 1/1 *Running')" = "$n" ] &&
        [ "$(k get pods -l app=hostname --no-headers 2>/dev/null | wc -l)" = "$n" ]; do
    [ $SECONDS -lt $end ] || { k get pods -o wide; die "expected $n ready pods"; }
    sleep 1
  done
}

# kube-proxy programs endpoint changes ~1 s after a pod turns Ready: wait
# until its iptables rules for Service smoke/NAME have exactly N endpoints.
wait_proxied() { # NAME N
  local end=$((SECONDS + 30))
  until [ "$(kexec iptables-save -t nat | grep -c -- "-A KUBE-SVC-.*\"$NS/$1 -> ")" = "$2" ]; do
    [ $SECONDS -lt $end ] || die "kube-proxy never programmed $2 endpoints for $NS/$1"
    sleep 0.5
  done
}

kubectl delete namespace "$NS" --ignore-not-found --wait=true >/dev/null
kubectl create namespace "$NS" >/dev/null
k apply -f - >/dev/null <<EOF
apiVersion: apps/v1
kind: Deployment
metadata: {name: hostname}
spec:
  replicas: 3
  selector: {matchLabels: {app: hostname}}
  template:
    metadata: {labels: {app: hostname}}
    spec:
      terminationGracePeriodSeconds: 1
      containers:
      - name: hostname
        image: $HOSTNAME_IMAGE
        imagePullPolicy: Never
        ports: [{containerPort: 8080}]
        readinessProbe: {httpGet: {path: /, port: 8080}, periodSeconds: 1}
---
apiVersion: v1
kind: Service
metadata: {name: hostname}
spec:
  selector: {app: hostname}
  ports: [{port: 80, targetPort: 8080}]
EOF
t0=$SECONDS
k rollout status deploy/hostname --timeout=120s >/dev/null
wait_count 3
log "3 replicas ready in $((SECONDS - t0))s"
k get pods -o wide

# 1. every pod IP answers with its own name, from the netns and from the host
while read -r name ip; do
  [ "$(kget "http://$ip:8080/")" = "$name" ] || die "pod $name at $ip (netns) did not answer"
  [ "$(hget "http://$ip:8080/")" = "$name" ] || die "pod $name at $ip (host) did not answer"
done < <(ready_pods)
log "pod IPs reachable (netns and host)"

# 2. the ClusterIP spreads over all 3 pods (kube-proxy iptables mode)
svc=$(k get svc hostname -o jsonpath='{.spec.clusterIP}')
wait_proxied hostname 3
seen=$(for _ in $(seq 60); do kget "http://$svc/"; done | sort | uniq -c)
echo "$seen"
[ "$(echo "$seen" | wc -l)" = 3 ] || die "ClusterIP $svc did not reach all 3 pods (netns)"
seen_h=$(for _ in $(seq 60); do hget "http://$svc/"; done | sort -u | wc -l)
[ "$seen_h" = 3 ] || die "ClusterIP $svc did not reach all 3 pods (host)"
log "ClusterIP $svc reaches all 3 pods (netns and host)"
# and from inside a pod (kubectl exec): pod -> ClusterIP -> pods on the same
# bridge, including itself (hairpin)
first=$(ready_pods | awk 'NR==1{print $1}')
seen=$(for _ in $(seq 30); do k exec "$first" -- /hostname get "http://$svc/"; done | sort -u | wc -l)
[ "$seen" = 3 ] || die "ClusterIP from pod $first reached $seen pods, not 3"
log "ClusterIP reaches all 3 pods from inside pod $first (kubectl exec works)"
# cluster DNS (CoreDNS): the Service by name, from a pod
name=$(k exec "$first" -- /hostname get http://hostname.smoke.svc.cluster.local/)
ready_pods | grep -q "^$name " || die "DNS name of the Service did not answer (got '$name')"
log "DNS: hostname.smoke.svc.cluster.local -> $name"

# 3. delete a pod: the ReplicaSet replaces it
victim=$(ready_pods | awk 'NR==1{print $1}')
k delete pod "$victim" --wait=true >/dev/null
wait_count 3
wait_proxied hostname 3
ready_pods | grep -q "^$victim " && die "$victim still there"
log "deleted $victim, replaced: $(ready_pods | cut -d' ' -f1 | tr '\n' ' ')"

# 4. scale 3 -> 2
k scale deploy/hostname --replicas=2 >/dev/null
wait_count 2
wait_proxied hostname 2
seen=$(for _ in $(seq 40); do kget "http://$svc/"; done | sort -u | wc -l)
[ "$seen" = 2 ] || die "after scale to 2 the Service answered from $seen pods"
log "scaled to 2; Service now spreads over 2 pods"

# 5. StatefulSet with a headless Service and the default ServiceAccount token
#    mounted, using the securityContext settings a sandbox may need.
k apply -f - >/dev/null <<EOF
apiVersion: v1
kind: Service
metadata: {name: sts}
spec: {clusterIP: None, selector: {app: sts}, ports: [{port: 8080}]}
---
apiVersion: apps/v1
kind: StatefulSet
metadata: {name: sts}
spec:
  serviceName: sts
  replicas: 2
  selector: {matchLabels: {app: sts}}
  template:
    metadata: {labels: {app: sts}}
    spec:
      terminationGracePeriodSeconds: 1
      hostUsers: false
      securityContext:
        seccompProfile: {type: Unconfined}
      containers:
      - name: c
        image: $HOSTNAME_IMAGE
        imagePullPolicy: Never
        securityContext:
          procMount: Unmasked
          allowPrivilegeEscalation: true
          capabilities: {add: [SYS_ADMIN, NET_ADMIN]}
EOF
k rollout status sts/sts --timeout=120s >/dev/null
k get pods -l app=sts -o wide
for p in sts-0 sts-1; do
  ip=$(k get pod "$p" -o jsonpath='{.status.podIP}')
  [ "$(hget "http://$ip:8080/")" = "$p" ] || die "$p did not answer"
done
[ "$(k exec sts-0 -- /hostname get http://sts-1.sts.smoke.svc.cluster.local:8080/)" = sts-1 ] || die "sts-1 not resolvable from sts-0"
log "StatefulSet sts-0/sts-1 running (own user namespace, unmasked /proc, seccomp Unconfined, SYS_ADMIN); sts-1.sts resolves"

kubectl delete namespace "$NS" --wait=false >/dev/null
log "smoke OK"
