#!/usr/bin/env bash
# build.sh — install the host packages and build (once) everything the one-node
# e2e Kubernetes cluster needs. Nothing is downloadable as a binary here (no
# container registry, no GitHub releases, no dl.k8s.io), so Kubernetes and etcd
# are compiled from the Go module proxy and images are assembled locally.
# Re-running is cheap: a binary is rebuilt only if its cached version stamp
# differs from the pinned version.
#
# Usage: build.sh [all|packages|k8s|etcd|coredns|containerd|runc|images]   (default: all)
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "$HERE/common.sh"

mkdir -p "$BIN_DIR" "$SRC_DIR" "$IMG_DIR"

# ---------------------------------------------------------------- packages
install_packages() {
  # runc: Debian's 1.1.5, only for the e2e's runtime handler that cannot do
  # user namespaces (a negative case); pods run on the runc built below.
  # libseccomp-dev and pkg-config: that runc's seccomp support (cgo).
  local pkgs=(runc libseccomp-dev pkg-config gcc libc6-dev containernetworking-plugins iptables openssl conntrack iproute2 util-linux procps)
  local missing=()
  for p in "${pkgs[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && { log "packages: all present"; return; }
  log "packages: installing ${missing[*]}"
  # There is no init system here, but if there were, keep the package from
  # starting the system containerd on /run/containerd: we run a private one.
  printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d; chmod +x /usr/sbin/policy-rc.d
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"
  rm -f /usr/sbin/policy-rc.d
}

# version stamp helpers: $BIN_DIR/.NAME.version holds the version it was built at
is_cached() { [ -x "$BIN_DIR/$1" ] && [ "$(cat "$BIN_DIR/.$1.version" 2>/dev/null)" = "$2" ]; }
stamp()     { echo "$2" > "$BIN_DIR/.$1.version"; }

# ---------------------------------------------------------------- kubernetes
# `go install k8s.io/kubernetes/cmd/...@v` refuses modules with replace
# directives (k8s has 31, pointing to ./staging). So: a wrapper module that
# requires k8s.io/kubernetes and replaces each staging module by its published
# v0.X.Y tag. The staging list is read from kubernetes' own go.mod.
K8S_CMDS=(kubectl kubelet kube-scheduler kube-proxy kube-controller-manager kube-apiserver)

k8s_wrapper() {
  local dir=$SRC_DIR/k8s-$K8S_VERSION
  [ -f "$dir/go.sum" ] && [ -f "$dir/.ready" ] && { echo "$dir"; return; }
  mkdir -p "$dir"
  local gomod
  gomod=$(cd "$dir" && GOFLAGS=-mod=mod go mod download -json "k8s.io/kubernetes@$K8S_VERSION" | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')
  [ -f "$gomod" ] || die "cannot download k8s.io/kubernetes@$K8S_VERSION"
  {
    echo "module codecage.local/e2e-k8s"
    echo
    echo "go 1.24.0"
    echo
    # same runtime GODEBUG defaults as upstream builds
    grep '^godebug' "$gomod" || true
    echo
    echo "require k8s.io/kubernetes $K8S_VERSION"
    echo
    echo "replace ("
    grep -E '^\s*k8s\.io/[^ ]+ => \./staging/' "$gomod" | awk -v v="$K8S_STAGING_VERSION" '{print "\t" $1 " => " $1 " " v}'
    echo ")"
  } > "$dir/go.mod"
  # tools.go pins the main packages so `go mod tidy` resolves their deps.
  {
    echo "//go:build tools"
    echo
    echo "package tools"
    echo
    echo "import ("
    for c in "${K8S_CMDS[@]}"; do echo "	_ \"k8s.io/kubernetes/cmd/$c\""; done
    echo ")"
  } > "$dir/tools.go"
  (cd "$dir" && go mod tidy >&2)
  touch "$dir/.ready"
  echo "$dir"
}

build_k8s() {
  local todo=()
  for c in "${K8S_CMDS[@]}"; do is_cached "$c" "$K8S_VERSION" || todo+=("$c"); done
  [ ${#todo[@]} -eq 0 ] && { log "k8s: all binaries cached at $K8S_VERSION"; return; }
  local dir; dir=$(k8s_wrapper)
  # Without these the binaries report v0.0.0-master, which kubectl/skew
  # checks and some components dislike.
  local major=${K8S_VERSION#v}; major=${major%%.*}
  local minor=${K8S_VERSION#v*.}; minor=${minor%%.*}
  local ld="-s -w"
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ld+=" -X $pkg.gitVersion=$K8S_VERSION -X $pkg.gitMajor=$major -X $pkg.gitMinor=$minor"
    ld+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=2026-01-01T00:00:00Z"
  done
  for c in "${todo[@]}"; do
    log "k8s: building $c $K8S_VERSION"
    local t0=$SECONDS
    (cd "$dir" && CGO_ENABLED=0 go build -trimpath -ldflags "$ld" -o "$BIN_DIR/$c.tmp" "k8s.io/kubernetes/cmd/$c")
    mv "$BIN_DIR/$c.tmp" "$BIN_DIR/$c"; stamp "$c" "$K8S_VERSION"
    log "k8s: built $c in $((SECONDS - t0))s"
  done
}

# ---------------------------------------------------------------- etcd
# Same replace-directive problem as k8s: build from a tiny wrapper module.
build_etcd() {
  is_cached etcd "$ETCD_VERSION" && { log "etcd: cached at $ETCD_VERSION"; return; }
  local dir=$SRC_DIR/etcd-$ETCD_VERSION
  mkdir -p "$dir"
  if [ ! -f "$dir/.ready" ]; then
    (cd "$dir" && { [ -f go.mod ] || go mod init codecage.local/e2e-etcd >&2; } && go get "go.etcd.io/etcd/server/v3@$ETCD_VERSION" >&2)
    touch "$dir/.ready"
  fi
  log "etcd: building $ETCD_VERSION"
  local t0=$SECONDS
  (cd "$dir" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$BIN_DIR/etcd.tmp" go.etcd.io/etcd/server/v3)
  mv "$BIN_DIR/etcd.tmp" "$BIN_DIR/etcd"; stamp etcd "$ETCD_VERSION"
  log "etcd: built in $((SECONDS - t0))s"
}

# ---------------------------------------------------------------- coredns
# Cluster DNS (Service and StatefulSet pod names). Its go.mod has no replace
# directives, so plain `go install` works. It runs as a node process, not a pod.
build_coredns() {
  is_cached coredns "$COREDNS_VERSION" && { log "coredns: cached at $COREDNS_VERSION"; return; }
  log "coredns: building $COREDNS_VERSION"
  local t0=$SECONDS tmp=$E2E_CACHE/gobin.tmp
  rm -rf "$tmp"; mkdir -p "$tmp"
  GOBIN=$tmp CGO_ENABLED=0 go install -trimpath -ldflags "-s -w" "github.com/coredns/coredns@$COREDNS_VERSION"
  mv "$tmp/coredns" "$BIN_DIR/coredns"; rm -rf "$tmp"; stamp coredns "$COREDNS_VERSION"
  log "coredns: built in $((SECONDS - t0))s"
}

# ---------------------------------------------------------------- containerd, runc
# containerd's go.mod has no replace directives: plain `go install` works.
# Static, without btrfs (no headers needed).
build_containerd() {
  local c todo=()
  for c in containerd containerd-shim-runc-v2 ctr; do is_cached "$c" "$CONTAINERD_VERSION" || todo+=("$c"); done
  [ ${#todo[@]} -eq 0 ] && { log "containerd: cached at $CONTAINERD_VERSION"; return; }
  log "containerd: building ${todo[*]} $CONTAINERD_VERSION"
  local t0=$SECONDS tmp=$E2E_CACHE/gobin.tmp pkgs=()
  for c in "${todo[@]}"; do pkgs+=("github.com/containerd/containerd/v2/cmd/$c@$CONTAINERD_VERSION"); done
  rm -rf "$tmp"; mkdir -p "$tmp"
  GOBIN=$tmp CGO_ENABLED=0 go install -trimpath -tags no_btrfs \
    -ldflags "-s -w -X github.com/containerd/containerd/v2/version.Version=$CONTAINERD_VERSION" "${pkgs[@]}"
  for c in "${todo[@]}"; do mv "$tmp/$c" "$BIN_DIR/$c"; stamp "$c" "$CONTAINERD_VERSION"; done
  rm -rf "$tmp"
  log "containerd: built in $((SECONDS - t0))s"
}

# runc needs cgo and libseccomp for its seccomp support (-tags seccomp).
build_runc() {
  is_cached runc "$RUNC_VERSION" && { log "runc: cached at $RUNC_VERSION"; return; }
  log "runc: building $RUNC_VERSION"
  local t0=$SECONDS tmp=$E2E_CACHE/gobin.tmp
  rm -rf "$tmp"; mkdir -p "$tmp"
  GOBIN=$tmp CGO_ENABLED=1 go install -trimpath -tags seccomp \
    -ldflags "-s -w -X main.version=${RUNC_VERSION#v}" "github.com/opencontainers/runc@$RUNC_VERSION"
  mv "$tmp/runc" "$BIN_DIR/runc"; rm -rf "$tmp"; stamp runc "$RUNC_VERSION"
  "$BIN_DIR/runc" features | grep -q '"user"' || die "runc $RUNC_VERSION: no user namespace support"
  log "runc: built in $((SECONDS - t0))s"
}

# ---------------------------------------------------------------- images
# No registry: the pause (sandbox) image and the test image are static Go
# programs packed into docker-archive tarballs by ./image (go-containerregistry),
# then imported into the cluster's containerd by `cluster.sh up` / `load`.
build_images() {
  local tooldir=$HERE/image
  local stampv
  stampv=$(cat "$tooldir"/go.mod "$tooldir"/*.go "$tooldir"/pause/*.go "$tooldir"/hostname/*.go | sha256sum | cut -c1-16)
  if [ "$(cat "$IMG_DIR/.version" 2>/dev/null)" = "$stampv" ] && [ -f "$IMG_DIR/pause.tar" ] && [ -f "$IMG_DIR/hostname.tar" ]; then
    log "images: cached"; return
  fi
  local work=$SRC_DIR/image-build; mkdir -p "$work"
  (cd "$tooldir" && CGO_ENABLED=0 go build -o "$work/mkimage" . \
                 && CGO_ENABLED=0 go build -ldflags "-s -w" -o "$work/pause" ./pause \
                 && CGO_ENABLED=0 go build -ldflags "-s -w" -o "$work/hostname" ./hostname)
  "$work/mkimage" -bin "$work/pause"    -name "$PAUSE_IMAGE"    -o "$IMG_DIR/pause.tar"
  "$work/mkimage" -bin "$work/hostname" -name "$HOSTNAME_IMAGE" -o "$IMG_DIR/hostname.tar"
  echo "$stampv" > "$IMG_DIR/.version"
  log "images: built $IMG_DIR/pause.tar $IMG_DIR/hostname.tar"
}

what=${1:-all}
case $what in
  packages) install_packages ;;
  k8s)      build_k8s ;;
  etcd)     build_etcd ;;
  coredns)  build_coredns ;;
  containerd) build_containerd ;;
  runc)     build_runc ;;
  images)   build_images ;;
  all)      install_packages; build_images; build_containerd; build_runc; build_etcd; build_coredns; build_k8s ;;
  *) die "usage: $0 [all|packages|k8s|etcd|coredns|containerd|runc|images]" ;;
esac
