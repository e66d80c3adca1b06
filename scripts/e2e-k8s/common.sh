# shellcheck shell=bash disable=SC2034
# common.sh — shared settings for build.sh and cluster.sh (sourced, not run).
# Everything built or run lives under $E2E_CACHE, outside the repo, so the
# repo stays clean and a warm cache makes `up` fast.

E2E_CACHE=${E2E_CACHE:-/var/cache/codecage-e2e}
K8S_VERSION=v1.34.4          # 1.35+ kubelets refuse cgroup v1 hosts; stay on 1.34
K8S_STAGING_VERSION=v0.34.4  # staging modules (k8s.io/api, ...) are tagged v0.X.Y
ETCD_VERSION=v3.5.21
COREDNS_VERSION=v1.12.1      # what kubeadm 1.34 ships
# User-namespaced pods (hostUsers: false) need containerd 2.0+ and runc 1.2+;
# Debian 12's are 1.6.20 (ignores hostUsers) and 1.1.5. Both are built from
# the Go module proxy. runc 1.5 wants the Rust libpathrs; 1.4 does not.
CONTAINERD_VERSION=v2.4.2
RUNC_VERSION=v1.4.4

BIN_DIR=$E2E_CACHE/bin
SRC_DIR=$E2E_CACHE/src
IMG_DIR=$E2E_CACHE/images

PAUSE_IMAGE=registry.k8s.io/pause:codecage   # name only; never pulled (no registry)
HOSTNAME_IMAGE=codecage.local/hostname:e2e   # tiny test HTTP server

export PATH=/usr/local/go/bin:$BIN_DIR:$PATH

log() { printf '[%s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }
