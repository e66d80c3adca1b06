#!/usr/bin/env bash
# Builds deploy/Dockerfile with buildah on a machine that reaches no image
# registry: debian:bookworm-slim is made by scripts/build-image.sh --base
# (mmdebstrap), golang:1.26-bookworm is that base plus this machine's Go
# (/usr/local/go) and CA bundle. Needs root, buildah and mmdebstrap.
#   deploy/image/prove-dockerfile.sh [source|prebuilt]   (default: source)
set -euo pipefail

main() {
	cd "$(dirname "$0")/../.."
	local mode="${1:-source}" goroot c tag=codecage:dockerfile
	command -v go >/dev/null || export PATH="/usr/local/go/bin:$PATH"
	goroot="$(go env GOROOT)"
	if ! buildah inspect --type image debian:bookworm-slim >/dev/null 2>&1; then
		scripts/build-image.sh --base bin/debian-bookworm-slim.tar >/dev/null
		buildah pull "docker-archive:bin/debian-bookworm-slim.tar"
	fi
	if [ "$mode" = source ] && ! buildah inspect --type image golang:1.26-bookworm >/dev/null 2>&1; then
		c="$(buildah from debian:bookworm-slim)"
		buildah copy "$c" "$goroot" /usr/local/go >/dev/null
		# This machine's CA bundle: it may reach the module proxy through
		# an intercepting proxy whose CA only the host trusts.
		buildah copy "$c" /etc/ssl/certs/ca-certificates.crt /etc/ssl/certs/ca-certificates.crt >/dev/null
		buildah config --env GOPATH=/go --env GOTOOLCHAIN=local \
			--env PATH=/go/bin:/usr/local/go/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
			--workingdir /go "$c"
		buildah commit --rm "$c" golang:1.26-bookworm
	fi
	if [ "$mode" = prebuilt ]; then
		scripts/build.sh
	fi
	# docker format keeps HEALTHCHECK (OCI has no field for it).
	buildah bud --format docker --network host --layers -f deploy/Dockerfile \
		--build-arg CODECAGE_BINARY="$mode" -t "$tag" .
	buildah images "$tag"
}

main "$@"; exit
