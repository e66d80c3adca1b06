#!/usr/bin/env bash
# cluster.sh — a throw-away one-node Kubernetes cluster for codecage's e2e tests.
#
#   cluster.sh up            start it (builds nothing: run build.sh first)
#   cluster.sh down          stop everything it started; safe to repeat
#   cluster.sh env           shell exports for `eval "$(cluster.sh env)"`
#   cluster.sh load IMG.tar  import a docker-archive / OCI tarball into the node
#   cluster.sh status        is it up?
#   cluster.sh verify-down   fail if any process/mount/netns/cgroup is left
#
# Isolation, and why:
#  * Network: every component runs in the network namespace $NETNS_NAME. The
#    node IP sits on a veth whose peer is in the host namespace, so host
#    processes reach the apiserver, pod IPs and ClusterIPs through it (host
#    routes for the pod and service CIDRs point at the node IP). The node has
#    no way out: its default route is `unreachable`, and host forwarding is
#    not touched. Nothing ever talks to the VM's own addresses.
#  * Mounts: the components also share a private mount namespace, held open by
#    a `sleep` "holder" process. containerd's and the kubelet's mounts (rootfs
#    overlays, pod netns, secrets, a private tmpfs /run, /var/lib/cni, /var/log)
#    live only there, so they cannot leak onto the host or collide with other
#    containerd users, and they vanish when the last process dies. /sys is
#    remounted for the netns (like `ip netns exec`) but the cgroup mounts are
#    carried over (`ip netns exec` loses them, which breaks the kubelet).
#  * Processes: all of them, pods included (kubelet cgroupRoot), live under the
#    cgroup /$CG_NAME in every v1 hierarchy; `down` freezes and SIGKILLs that
#    tree, so nothing survives it. Host sysctls the kubelet rewrites
#    (kernel.panic, vm.overcommit_memory, ...) are saved by `up`, restored by `down`.
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "$HERE/common.sh"

RUN=$E2E_CACHE/run                  # all runtime state; wiped by `up`
PKI=$RUN/pki
PIDS=$RUN/pids
LOGS=$RUN/logs
NETNS_NAME=codecage-e2e
NETNS=/run/netns/$NETNS_NAME
CG_NAME=codecage-e2e
NODE_NAME=e2e-node
HOST_IF=ce2e-host                   # veth end in the host netns
NODE_IF=ce2e-node                   # veth end in the node netns
HOST_IP=10.213.0.1
NODE_IP=10.213.0.2
NODE_NET=10.213.0.0/24
POD_CIDR=10.214.0.0/24
SVC_CIDR=10.215.0.0/24
SVC_KUBERNETES_IP=10.215.0.1
SOCK=$RUN/containerd/containerd.sock
ADMIN_KUBECONFIG=$RUN/admin.kubeconfig
# host sysctls the kubelet rewrites (setupKernelTunables); restored by `down`
KUBELET_SYSCTLS=(vm.overcommit_memory vm.panic_on_oom kernel.panic kernel.panic_on_oops kernel.keys.root_maxkeys kernel.keys.root_maxbytes)

kubectl_() { kubectl --kubeconfig "$ADMIN_KUBECONFIG" "$@"; }

cg_hierarchies() { # v1 hierarchies mounted under /sys/fs/cgroup (not the empty v2 one)
  awk '$9 == "cgroup" && $5 ~ "^/sys/fs/cgroup/" {print $5}' /proc/self/mountinfo
}

cg_all_hierarchies() { # plus the (empty) v2 mount: runc's hybrid mode creates cgroups there too
  awk '($9 == "cgroup" || $9 == "cgroup2") && $5 ~ "^/sys/fs/cgroup/" {print $5}' /proc/self/mountinfo
}

holder_pid() { local p; p=$(cat "$PIDS/holder" 2>/dev/null) && kill -0 "$p" 2>/dev/null && echo "$p"; }

# ------------------------------------------------------------------ certs
pki() {
  mkdir -p "$PKI"; cd "$PKI"
  openssl ecparam -name prime256v1 -genkey -noout -out ca.key 2>/dev/null
  openssl req -x509 -new -key ca.key -subj "/CN=codecage-e2e-ca" -days 3650 -out ca.crt 2>/dev/null
  # NAME CN O SANS
  cert() {
    openssl ecparam -name prime256v1 -genkey -noout -out "$1.key" 2>/dev/null
    openssl req -new -key "$1.key" -subj "/CN=$2${3:+/O=$3}" -out "$1.csr" 2>/dev/null
    { echo "basicConstraints=CA:FALSE"
      echo "keyUsage=critical,digitalSignature,keyEncipherment"
      echo "extendedKeyUsage=serverAuth,clientAuth"
      if [ -n "${4:-}" ]; then echo "subjectAltName=$4"; fi; } > "$1.ext"
    openssl x509 -req -in "$1.csr" -CA ca.crt -CAkey ca.key -CAcreateserial -days 3650 -extfile "$1.ext" -out "$1.crt" 2>/dev/null
    rm -f "$1.csr" "$1.ext"
  }
  cert apiserver kube-apiserver "" "IP:$NODE_IP,IP:$SVC_KUBERNETES_IP,IP:127.0.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local"
  cert apiserver-kubelet-client kube-apiserver-kubelet-client system:masters
  cert admin kubernetes-admin system:masters
  cert controller-manager system:kube-controller-manager
  cert scheduler system:kube-scheduler
  cert kubelet "system:node:$NODE_NAME" system:nodes "IP:$NODE_IP,DNS:$NODE_NAME"
  cert kube-proxy system:kube-proxy
  cert coredns system:coredns
  openssl genrsa -out sa.key 2048 2>/dev/null
  openssl rsa -in sa.key -pubout -out sa.pub 2>/dev/null
  cd - >/dev/null
}

kubeconfig() { # OUT CERTNAME
  cat > "$1" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: codecage-e2e
  cluster: {server: "https://$NODE_IP:6443", certificate-authority: "$PKI/ca.crt"}
users:
- name: $2
  user: {client-certificate: "$PKI/$2.crt", client-key: "$PKI/$2.key"}
contexts:
- name: codecage-e2e
  context: {cluster: codecage-e2e, user: $2, namespace: default}
current-context: codecage-e2e
EOF
}

# ------------------------------------------------------------------ configs
write_configs() {
  kubeconfig "$ADMIN_KUBECONFIG" admin
  kubeconfig "$RUN/controller-manager.kubeconfig" controller-manager
  kubeconfig "$RUN/scheduler.kubeconfig" scheduler
  kubeconfig "$RUN/kubelet.kubeconfig" kubelet
  kubeconfig "$RUN/kube-proxy.kubeconfig" kube-proxy
  kubeconfig "$RUN/coredns.kubeconfig" coredns

  mkdir -p "$RUN/containerd" "$RUN/cni/net.d" "$RUN/cni/lib" "$RUN/varlog" "$RUN/kubelet"
  # containerd 2 (built by build.sh): a version 3 config. Two runtime
  # handlers: runc (the runc build.sh built, which user-namespaced pods
  # need) and runc-debian (Debian's runc 1.1.5, which cannot: the e2e's
  # node without user namespaces, chosen by a RuntimeClass). No
  # cgroup_writable: this host is cgroup v1, where containerd refuses it.
  cat > "$RUN/containerd/config.toml" <<EOF
version = 3
root = "$RUN/containerd/root"
state = "$RUN/containerd/state"
[grpc]
  address = "$SOCK"
[debug]
  address = ""
[metrics]
  address = ""
[plugins]
  [plugins."io.containerd.cri.v1.images"]
    snapshotter = "overlayfs"
    [plugins."io.containerd.cri.v1.images".pinned_images]
      sandbox = "$PAUSE_IMAGE"
  [plugins."io.containerd.cri.v1.runtime"]
    # The VM lacks CAP_SYS_RESOURCE: without this every pod fails with
    # "can't get final child's PID" (runc cannot lower oom_score_adj).
    restrict_oom_score_adj = true
    # pod netns bind mounts under our state dir, not /run/netns
    netns_mounts_under_state_dir = true
    disable_apparmor = true
    [plugins."io.containerd.cri.v1.runtime".containerd]
      default_runtime_name = "runc"
      [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc]
        runtime_type = "io.containerd.runc.v2"
        [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc.options]
          BinaryName = "$BIN_DIR/runc"
          Root = "$RUN/containerd/runc"
          SystemdCgroup = false
      [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc-debian]
        runtime_type = "io.containerd.runc.v2"
        [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc-debian.options]
          BinaryName = "/usr/sbin/runc"
          Root = "$RUN/containerd/runc-debian"
          SystemdCgroup = false
    [plugins."io.containerd.cri.v1.runtime".cni]
      bin_dirs = ["/usr/lib/cni"]
      conf_dir = "$RUN/cni/net.d"
      max_conf_num = 1
  [plugins."io.containerd.grpc.v1.cri"]
    stream_server_address = "127.0.0.1"
EOF

  # CNI: a plain Linux bridge in the node netns; host-local IPAM.
  cat > "$RUN/cni/net.d/10-codecage-e2e.conflist" <<EOF
{
  "cniVersion": "0.4.0",
  "name": "codecage-e2e",
  "plugins": [
    {"type": "bridge", "bridge": "cni0", "isGateway": true, "ipMasq": false,
     "hairpinMode": true,
     "ipam": {"type": "host-local", "ranges": [[{"subnet": "$POD_CIDR"}]],
              "routes": [{"dst": "0.0.0.0/0"}]}},
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
EOF

  # No upstream DNS exists here; keep pods from inheriting the VM's resolver
  # (dnsPolicy: Default pods get this file).
  echo "# codecage-e2e: no DNS server" > "$RUN/resolv.conf"

  # Cluster DNS: CoreDNS as a node process on the node IP (clusterDNS below).
  # No `forward`: names outside cluster.local fail fast instead of leaving.
  cat > "$RUN/Corefile" <<EOF
.:53 {
    bind $NODE_IP
    errors
    ready 127.0.0.1:8181
    kubernetes cluster.local in-addr.arpa ip6.arpa {
        kubeconfig $RUN/coredns.kubeconfig codecage-e2e
        pods insecure
        fallthrough in-addr.arpa ip6.arpa
    }
    cache 30
}
EOF
  cat > "$RUN/coredns-rbac.yaml" <<EOF
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: "system:coredns"}
rules:
- apiGroups: [""]
  resources: [endpoints, services, pods, namespaces]
  verbs: [list, watch]
- apiGroups: [discovery.k8s.io]
  resources: [endpointslices]
  verbs: [list, watch]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: "system:coredns"}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: "system:coredns"}
subjects:
- {apiGroup: rbac.authorization.k8s.io, kind: User, name: "system:coredns"}
EOF

  cat > "$RUN/kubelet.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: $NODE_IP
port: 10250
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: "$PKI/ca.crt"}
authorization: {mode: Webhook}
containerRuntimeEndpoint: unix://$SOCK
cgroupDriver: cgroupfs
# all pods under our own cgroup tree so \`down\` can kill them all
cgroupRoot: /$CG_NAME
# the host is cgroup v1 (kubelet >= 1.35 refuses it)
failCgroupV1: false
failSwapOn: false
resolvConf: "$RUN/resolv.conf"
clusterDomain: cluster.local
clusterDNS: [$NODE_IP]
volumePluginDir: "$RUN/kubelet/volume-plugins"
# images cannot be re-pulled (no registry): never garbage-collect them
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard: {memory.available: 100Mi, nodefs.available: 1%, imagefs.available: 1%, nodefs.inodesFree: 1%}
serializeImagePulls: false
maxPods: 110
EOF

  cat > "$RUN/kube-proxy.yaml" <<EOF
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection: {kubeconfig: "$RUN/kube-proxy.kubeconfig"}
mode: iptables
hostnameOverride: $NODE_NAME
clusterCIDR: $POD_CIDR
healthzBindAddress: 127.0.0.1:10256
metricsBindAddress: 127.0.0.1:10249
# SNAT service traffic so pod -> ClusterIP -> pod on the same bridge and
# host -> ClusterIP both get replies back through the node's conntrack.
iptables: {masqueradeAll: true}
# nf_conntrack_max & co are global (init-netns only): leave them alone
conntrack: {maxPerCore: 0, min: 0, tcpEstablishedTimeout: 0s, tcpCloseWaitTimeout: 0s}
EOF
}

# ------------------------------------------------------------------ plumbing
setup_netns() {
  # refuse to shadow someone else's routes
  local r
  for r in $NODE_NET $POD_CIDR $SVC_CIDR; do
    if ip route show to match "${r%/*}" | grep -v "^default" | grep -q .; then die "host already routes $r"; fi
  done
  ip netns add "$NETNS_NAME"
  local ns=(ip -n "$NETNS_NAME")
  "${ns[@]}" link set lo up
  ip link add "$HOST_IF" type veth peer name "$NODE_IF" netns "$NETNS_NAME"
  ip addr add "$HOST_IP/24" dev "$HOST_IF"
  ip link set "$HOST_IF" up
  "${ns[@]}" addr add "$NODE_IP/24" dev "$NODE_IF"
  "${ns[@]}" link set "$NODE_IF" up
  # no way out of the node: anything not local fails fast
  "${ns[@]}" route add unreachable default
  # Locally generated packets are routed *before* kube-proxy's OUTPUT DNAT,
  # so ClusterIPs need some route or connect() fails at once. This one is
  # only a placeholder: DNAT re-routes to the pod; an IP without a Service
  # just goes unanswered (nobody on the link owns it; the host forwards nothing).
  "${ns[@]}" route add "$SVC_CIDR" dev "$NODE_IF"
  ip route add "$POD_CIDR" via "$NODE_IP" dev "$HOST_IF"
  ip route add "$SVC_CIDR" via "$NODE_IP" dev "$HOST_IF"
  nsenter --net="$NETNS" sysctl -qw net.ipv4.ip_forward=1
}

setup_cgroups() {
  local h
  for h in $(cg_hierarchies); do
    mkdir -p "$h/$CG_NAME/system"
    if [ -f "$h/cpuset.cpus" ]; then  # v1 cpuset children start empty
      cat "$h/cpuset.cpus" > "$h/$CG_NAME/cpuset.cpus";        cat "$h/cpuset.mems" > "$h/$CG_NAME/cpuset.mems"
      cat "$h/cpuset.cpus" > "$h/$CG_NAME/system/cpuset.cpus"; cat "$h/cpuset.mems" > "$h/$CG_NAME/system/cpuset.mems"
    fi
  done
}

# Runs "$@" in the background inside our cgroup and namespaces; records the pid.
start() {
  local name=$1; shift
  local holder; holder=$(holder_pid) || die "holder not running"
  (
    for h in $(cg_hierarchies); do echo "$BASHPID" > "$h/$CG_NAME/system/cgroup.procs"; done
    exec setsid nsenter --target "$holder" --net --mount -- "$@" >"$LOGS/$name.log" 2>&1 </dev/null
  ) &
  echo $! > "$PIDS/$name"
}

start_holder() {
  local ready=$RUN/holder.ready
  # bind-mount target; libcni has no setting for its cache dir
  if [ ! -d /var/lib/cni ]; then mkdir -p /var/lib/cni; touch "$E2E_CACHE/.created-var-lib-cni"; fi
  (
    for h in $(cg_hierarchies); do echo "$BASHPID" > "$h/$CG_NAME/system/cgroup.procs"; done
    exec setsid nsenter --net="$NETNS" unshare --mount --propagation private -- /bin/sh -ec '
      RUN=$1
      # fresh /sys for this netns, keeping the host cgroup mounts under it
      mkdir -p "$RUN/mnt/cg"
      mount --rbind /sys/fs/cgroup "$RUN/mnt/cg"
      mount -t sysfs sysfs /sys
      mount --rbind "$RUN/mnt/cg" /sys/fs/cgroup
      umount -l "$RUN/mnt/cg"
      # hard-coded paths of containerd shims (/run/containerd/s), libcni
      # (/var/lib/cni) and the kubelet (/var/log/containers), made private
      mount -t tmpfs -o mode=755 codecage-e2e-run /run
      mkdir -p /run/containerd
      mount --bind "$RUN/cni/lib" /var/lib/cni
      mount --bind "$RUN/varlog" /var/log
      touch "$RUN/holder.ready"
      exec sleep infinity' holder "$RUN" >"$LOGS/holder.log" 2>&1 </dev/null
  ) &
  echo $! > "$PIDS/holder"
  for _ in $(seq 50); do [ -f "$ready" ] && return; kill -0 "$(cat "$PIDS/holder")" 2>/dev/null || break; sleep 0.1; done
  cat "$LOGS/holder.log" >&2; die "holder failed"
}

wait_for() { # DESC TIMEOUT CMD...
  local desc=$1 t=$2; shift 2
  local end=$((SECONDS + t))
  until "$@" >/dev/null 2>&1; do
    [ $SECONDS -lt $end ] || die "timed out waiting for $desc (logs: $LOGS)"
    sleep 0.5
  done
}

load_image() { # TAR [ctr import args]
  local tar=$1; shift
  [ -S "$SOCK" ] || die "cluster is not up"
  ctr -a "$SOCK" -n k8s.io images import "$@" "$tar" >&2
}

# ------------------------------------------------------------------ up
up() {
  local t0=$SECONDS
  if [ -f "$RUN/up.ok" ] && holder_pid >/dev/null && kubectl_ get --raw /readyz >/dev/null 2>&1; then
    log "already up"; info; return
  fi
  for b in containerd containerd-shim-runc-v2 ctr runc etcd coredns kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy kubectl; do
    [ -x "$BIN_DIR/$b" ] || die "$BIN_DIR/$b missing: run $HERE/build.sh"
  done
  [ -f "$IMG_DIR/pause.tar" ] || die "$IMG_DIR/pause.tar missing: run $HERE/build.sh"
  down_quiet=1 down   # leftovers of a failed/aborted run
  rm -rf "$RUN"; mkdir -p "$RUN" "$PIDS" "$LOGS"
  trap 'rc=$?; if [ $rc -ne 0 ]; then log "up failed; logs in $LOGS"; tail -n 5 "$LOGS"/*.log >&2 2>/dev/null || true;
        [ "${E2E_KEEP_ON_FAIL:-0}" = 1 ] || down_quiet=1 down; fi' EXIT

  for s in "${KUBELET_SYSCTLS[@]}"; do echo "$s=$(sysctl -n "$s")"; done > "$E2E_CACHE/sysctls.saved"
  pki
  write_configs
  setup_netns
  setup_cgroups
  start_holder

  start containerd containerd --config "$RUN/containerd/config.toml"
  start etcd etcd --name e2e --data-dir "$RUN/etcd" \
    --listen-client-urls http://127.0.0.1:2379 --advertise-client-urls http://127.0.0.1:2379 \
    --listen-peer-urls http://127.0.0.1:2380 --initial-advertise-peer-urls http://127.0.0.1:2380 \
    --initial-cluster e2e=http://127.0.0.1:2380 --unsafe-no-fsync
  # No --allow-privileged: the API server refuses privileged pods. The
  # gate stands in for Pod Security 1.35, which admits procMount: Unmasked
  # at baseline for pods with hostUsers: false (1.34's policy needs it).
  start kube-apiserver kube-apiserver \
    --etcd-servers=http://127.0.0.1:2379 \
    --advertise-address="$NODE_IP" --bind-address=0.0.0.0 --secure-port=6443 \
    --service-cluster-ip-range="$SVC_CIDR" \
    --client-ca-file="$PKI/ca.crt" \
    --tls-cert-file="$PKI/apiserver.crt" --tls-private-key-file="$PKI/apiserver.key" \
    --kubelet-client-certificate="$PKI/apiserver-kubelet-client.crt" \
    --kubelet-client-key="$PKI/apiserver-kubelet-client.key" \
    --service-account-issuer=https://kubernetes.default.svc.cluster.local \
    --service-account-key-file="$PKI/sa.pub" --service-account-signing-key-file="$PKI/sa.key" \
    --authorization-mode=Node,RBAC --enable-admission-plugins=NodeRestriction \
    --kubelet-preferred-address-types=InternalIP,Hostname \
    --feature-gates=UserNamespacesPodSecurityStandards=true --profiling=false

  wait_for containerd 30 test -S "$SOCK"
  load_image "$IMG_DIR/pause.tar"
  if [ -f "$IMG_DIR/hostname.tar" ]; then load_image "$IMG_DIR/hostname.tar"; fi

  wait_for kube-apiserver 90 kubectl_ get --raw /readyz
  log "apiserver ready after $((SECONDS - t0))s"
  start kube-controller-manager kube-controller-manager \
    --kubeconfig="$RUN/controller-manager.kubeconfig" \
    --authentication-kubeconfig="$RUN/controller-manager.kubeconfig" \
    --authorization-kubeconfig="$RUN/controller-manager.kubeconfig" \
    --bind-address=127.0.0.1 --leader-elect=false --use-service-account-credentials=true \
    --service-account-private-key-file="$PKI/sa.key" --root-ca-file="$PKI/ca.crt" \
    --cluster-signing-cert-file="$PKI/ca.crt" --cluster-signing-key-file="$PKI/ca.key" \
    --allocate-node-cidrs=false --service-cluster-ip-range="$SVC_CIDR" --profiling=false
  start kube-scheduler kube-scheduler \
    --kubeconfig="$RUN/scheduler.kubeconfig" \
    --authentication-kubeconfig="$RUN/scheduler.kubeconfig" \
    --authorization-kubeconfig="$RUN/scheduler.kubeconfig" \
    --bind-address=127.0.0.1 --leader-elect=false --profiling=false
  start kubelet kubelet --config="$RUN/kubelet.yaml" --kubeconfig="$RUN/kubelet.kubeconfig" \
    --root-dir="$RUN/kubelet" --hostname-override="$NODE_NAME" --node-ip="$NODE_IP" \
    --tls-cert-file="$PKI/kubelet.crt" --tls-private-key-file="$PKI/kubelet.key"
  start kube-proxy kube-proxy --config="$RUN/kube-proxy.yaml"
  kubectl_ apply -f "$RUN/coredns-rbac.yaml" >/dev/null
  start coredns coredns -conf "$RUN/Corefile"

  wait_for "node Ready" 120 sh -c "kubectl --kubeconfig '$ADMIN_KUBECONFIG' get node $NODE_NAME -o jsonpath='{.status.conditions[?(@.type==\"Ready\")].status}' | grep -qx True"
  wait_for "default ServiceAccount" 60 kubectl_ -n default get serviceaccount default
  wait_for "CoreDNS" 60 nsenter --net="$NETNS" curl -sf --noproxy '*' http://127.0.0.1:8181/ready
  touch "$RUN/up.ok"
  trap - EXIT
  log "cluster up in $((SECONDS - t0))s"
  info
}

info() {
  cat <<EOF
codecage-e2e cluster is up (node $NODE_NAME, Kubernetes $K8S_VERSION).
  KUBECONFIG=$ADMIN_KUBECONFIG            (admin, system:masters)
  apiserver:  https://$NODE_IP:6443  (inside netns $NETNS; reachable from the host via $HOST_IF)
  pod CIDR:   $POD_CIDR    service CIDR: $SVC_CIDR
  cluster DNS: CoreDNS at $NODE_IP:53 (cluster.local only; nothing upstream)
  From the host, pod IPs and ClusterIPs are routed into the netns; or run a
  command inside it:  nsenter --net=$NETNS -- CMD
  Load an image:      $HERE/cluster.sh load IMAGE.tar   (pods: imagePullPolicy: Never)
  Test image:         $HOSTNAME_IMAGE (HTTP :8080 -> hostname)
  Logs:               $LOGS/ (pod logs: $RUN/varlog/pods)
  Shell setup:        eval "\$($HERE/cluster.sh env)"
EOF
}

env_() {
  cat <<EOF
export KUBECONFIG=$ADMIN_KUBECONFIG
export E2E_NETNS=$NETNS
export E2E_NODE_IP=$NODE_IP
export E2E_POD_CIDR=$POD_CIDR
export E2E_SVC_CIDR=$SVC_CIDR
export E2E_CONTAINERD_SOCK=$SOCK
export E2E_KUBELET_DIR=$RUN/kubelet
export PATH=$BIN_DIR:\$PATH
kexec() { nsenter --net=$NETNS -- "\$@"; }
EOF
}

# ------------------------------------------------------------------ down
cg_tasks() {
  local h
  for h in $(cg_all_hierarchies); do
    if [ -d "$h/$CG_NAME" ]; then find "$h/$CG_NAME" -name cgroup.procs -exec cat {} + 2>/dev/null || true; fi
  done | sort -u
}

down() {
  local quiet=${down_quiet:-0}
  # 1. polite stop, in reverse dependency order (kubelet first: no restarts)
  local n p
  for n in kubelet kube-proxy coredns kube-scheduler kube-controller-manager kube-apiserver etcd containerd; do
    p=$(cat "$PIDS/$n" 2>/dev/null) && kill -TERM "$p" 2>/dev/null || true
  done
  for _ in $(seq 15); do   # at most 3 s: the state is thrown away anyway
    local alive=0
    for n in kubelet kube-proxy coredns kube-scheduler kube-controller-manager kube-apiserver etcd containerd; do
      p=$(cat "$PIDS/$n" 2>/dev/null) && kill -0 "$p" 2>/dev/null && alive=1
    done
    [ $alive = 0 ] && break; sleep 0.2
  done
  # 2. everything left in our cgroup tree (holder, shims, pods): freeze, kill, thaw
  local fz=/sys/fs/cgroup/freezer/$CG_NAME
  for _ in $(seq 50); do
    local tasks; tasks=$(cg_tasks)
    [ -z "$tasks" ] && break
    if [ -d "$fz" ]; then echo FROZEN > "$fz/freezer.state" 2>/dev/null || true; fi
    kill -KILL $tasks 2>/dev/null || true
    if [ -d "$fz" ]; then echo THAWED > "$fz/freezer.state" 2>/dev/null || true; fi
    sleep 0.2
  done
  [ -z "$(cg_tasks)" ] || log "WARNING: processes left in cgroup /$CG_NAME: $(cg_tasks | tr '\n' ' ')"
  # killed pods become zombies until PID 1 reaps them (they have left the
  # cgroup's task list but not /proc): wait for that too
  for _ in $(seq 50); do
    grep -qs ":/$CG_NAME\(/\|\$\)" /proc/[0-9]*/cgroup || break
    sleep 0.1
  done
  # 3. anything else still inside the node netns (e.g. a forgotten kexec), but
  #    never ourselves or our ancestors
  if [ -e "$NETNS" ]; then
    local nsid self=" $$ " a=$$
    nsid=$(stat -L -c %i "$NETNS")
    while [ "$a" -gt 1 ]; do a=$(awk '{print $4}' "/proc/$a/stat" 2>/dev/null || echo 1); self+="$a "; done
    for p in /proc/[0-9]*; do
      p=${p#/proc/}
      [ "$(stat -L -c %i "/proc/$p/ns/net" 2>/dev/null)" = "$nsid" ] || continue
      case $self in *" $p "*) continue ;; esac
      kill -KILL "$p" 2>/dev/null || true
    done
  fi
  # 4. cgroups (deepest first; retried while the kernel finishes exits)
  local h
  for h in $(cg_all_hierarchies); do
    [ -d "$h/$CG_NAME" ] || continue
    for _ in $(seq 25); do
      find "$h/$CG_NAME" -depth -type d -exec rmdir {} + 2>/dev/null || true
      [ -d "$h/$CG_NAME" ] || break; sleep 0.2
    done
    if [ -d "$h/$CG_NAME" ]; then log "WARNING: could not remove $h/$CG_NAME"; fi
  done
  # 5. network: deleting the netns deletes the veth pair, the bridge, the pod
  #    links and every iptables rule (all were inside it); host routes go with
  #    the host veth end.
  ip link del "$HOST_IF" 2>/dev/null || true
  ip netns del "$NETNS_NAME" 2>/dev/null || true
  # 6. mounts: all were in the private mount namespace, gone with its last
  #    process; sweep the host anyway in case something escaped. Only under
  #    $RUN: other tools keep their own things elsewhere in $E2E_CACHE.
  local m
  for m in $(awk -v c="$RUN/" 'index($5, c) == 1 {print $5}' /proc/self/mountinfo | sort -r); do
    umount -l "$m" 2>/dev/null || true
  done
  if [ -f "$E2E_CACHE/.created-var-lib-cni" ]; then
    rmdir /var/lib/cni 2>/dev/null || true; rm -f "$E2E_CACHE/.created-var-lib-cni"
  fi
  # 7. host sysctls the kubelet changed
  if [ -f "$E2E_CACHE/sysctls.saved" ]; then
    while IFS= read -r kv; do sysctl -qw "$kv" 2>/dev/null || true; done < "$E2E_CACHE/sysctls.saved"
    rm -f "$E2E_CACHE/sysctls.saved"
  fi
  # 8. state: keep only the logs for post-mortems
  if [ -d "$RUN" ]; then
    find "$RUN" -mindepth 1 -maxdepth 1 ! -name logs -exec rm -rf {} +
  fi
  [ "$quiet" = 1 ] || log "cluster down"
}

# Exit 1 and list them if anything of ours is still around.
verify_down() {
  local bad=0 p
  # ours = binary in $BIN_DIR, command line naming $RUN, or in our cgroup
  # tree (pods, shims)
  local pids
  pids=$( { find /proc -maxdepth 2 -path '/proc/[0-9]*/exe' -lname "$BIN_DIR/*" 2>/dev/null || true
            grep -las "$RUN/" /proc/[0-9]*/cmdline || true
            grep -ls ":/$CG_NAME\(/\|\$\)" /proc/[0-9]*/cgroup || true; } | cut -d/ -f3 | sort -u)
  for p in $pids; do
    [ "$p" = $$ ] && continue
    [ -d "/proc/$p" ] || continue
    echo "process: $p $(tr '\0' ' ' 2>/dev/null < "/proc/$p/cmdline" | cut -c1-150)"; bad=1
  done
  if grep -q " $RUN/" /proc/self/mountinfo; then echo "mounts:"; grep " $RUN/" /proc/self/mountinfo; bad=1; fi
  if [ -e "$NETNS" ]; then echo "netns: $NETNS"; bad=1; fi
  if ip link show "$HOST_IF" >/dev/null 2>&1; then echo "link: $HOST_IF"; bad=1; fi
  for p in $(cg_all_hierarchies); do
    if [ -d "$p/$CG_NAME" ]; then echo "cgroup: $p/$CG_NAME"; bad=1; fi
  done
  if [ $bad = 0 ]; then echo "clean: no processes, mounts, netns, links or cgroups left"; fi
  return $bad
}

status() {
  if [ -f "$RUN/up.ok" ] && holder_pid >/dev/null && kubectl_ get --raw /readyz >/dev/null 2>&1; then
    echo up; kubectl_ get nodes -o wide
  else
    echo down; return 1
  fi
}

case ${1:-} in
  up)     up ;;
  down)   down ;;
  env)    env_ ;;
  info)   info ;;
  status) status ;;
  verify-down) verify_down ;;
  load)   [ $# -ge 2 ] || die "usage: $0 load IMAGE.tar [ctr import args]"; shift; load_image "$@" ;;
  *) echo "usage: $0 up|down|env|status|info|verify-down|load IMAGE.tar" >&2; exit 2 ;;
esac
