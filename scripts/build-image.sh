#!/usr/bin/env bash
# Builds an OCI image tarball without any registry: the root filesystem comes
# from Debian's mirror through mmdebstrap, the layers are packed by
# deploy/image (Go, standard library only). The tarball loads with
# `ctr images import`, `podman load` and `docker load`.
#
#   scripts/build-image.sh [OUT.tar]             codecage:dev (default out: bin/codecage-image.tar)
#   scripts/build-image.sh --postgres [OUT.tar]  codecage-e2e-postgres:15 (default: bin/codecage-e2e-postgres.tar)
#   scripts/build-image.sh --base [OUT.tar]      debian:bookworm-slim look-alike (for deploy/image/prove-dockerfile.sh)
#
# The root filesystem, the expensive part, is cached in $CODECAGE_IMAGE_CACHE
# (default /var/cache/codecage-e2e/image), keyed by everything that goes into
# it (suite, package list, hooks); rebuilding after a code change repacks the
# binary layer only. IMAGE_TAG overrides the tag; CODECAGE_BINARY=PATH packs
# that (static) binary instead of building one. Needs root and mmdebstrap
# (apt-get install mmdebstrap).
set -euo pipefail

# All in a function: bash reads the whole of it before running any of it.
main() {
	cd "$(dirname "$0")/.."
	command -v go >/dev/null || export PATH="/usr/local/go/bin:$PATH"

	local kind=app tag out packages bin
	kind=app
	case "${1:-}" in
	--postgres) kind=postgres; shift ;;
	--base) kind=base; shift ;;
	--app) shift ;;
	-h | --help) sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
	esac
	cache="${CODECAGE_IMAGE_CACHE:-/var/cache/codecage-e2e/image}"
	suite=bookworm
	mirrors=(
		"deb http://deb.debian.org/debian $suite main"
		"deb http://deb.debian.org/debian $suite-updates main"
		"deb http://deb.debian.org/debian-security $suite-security main"
	)
	# As in Debian's -slim images: no manuals, documentation or translations.
	slim=(
		--dpkgopt='path-exclude=/usr/share/man/*'
		--dpkgopt='path-exclude=/usr/share/groff/*'
		--dpkgopt='path-exclude=/usr/share/info/*'
		--dpkgopt='path-exclude=/usr/share/lintian/*'
		--dpkgopt='path-exclude=/usr/share/linda/*'
		--dpkgopt='path-exclude=/usr/share/doc/*'
		--dpkgopt='path-include=/usr/share/doc/*/copyright'
		--dpkgopt='path-exclude=/usr/share/locale/*'
		--dpkgopt='path-include=/usr/share/locale/locale.alias'
	)
	hooks=()
	# Keep in step with scripts/setup.sh and deploy/Dockerfile.
	app_packages=(python3 python3-pip python3-numpy python3-pandas python3-scipy python3-matplotlib
		python3-sympy python3-sklearn python3-requests python3-cloudpickle runsc ca-certificates tini)
	case $kind in
	app)
		tag="${IMAGE_TAG:-codecage:dev}"
		out="${1:-bin/codecage-image.tar}"
		packages=("${app_packages[@]}")
		# matplotlib's font cache, built once (see scripts/setup.sh).
		hooks=(--customize-hook='chroot "$1" sh -ec "mkdir -p /var/cache/codecage/matplotlib /var/lib/codecage; MPLCONFIGDIR=/var/cache/codecage/matplotlib /usr/bin/python3 -I -c \"import matplotlib.font_manager\"; chmod -R a+rX /var/cache/codecage"')
		;;
	postgres)
		tag="${IMAGE_TAG:-codecage-e2e-postgres:15}"
		out="${1:-bin/codecage-e2e-postgres.tar}"
		packages=(postgresql-15 ca-certificates tini)
		# The entrypoint makes its own cluster in $PGDATA: drop the packaged one.
		hooks=(--customize-hook='chroot "$1" pg_dropcluster 15 main')
		;;
	base)
		tag="${IMAGE_TAG:-debian:bookworm-slim}"
		out="${1:-bin/debian-bookworm-slim.tar}"
		packages=(ca-certificates)
		;;
	esac

	# The cache key covers every input of mmdebstrap.
	recipe="$(printf '%s\n' "v1" "$kind" "$suite" minbase "${mirrors[@]}" "${slim[@]}" "${packages[@]}" "${hooks[@]}")"
	key="$(printf '%s' "$recipe" | sha256sum | cut -c1-16)"
	rootfs="$cache/rootfs-$kind-$key.tar"
	mkdir -p "$cache" "$(dirname "$out")"
	if [ ! -s "$rootfs" ]; then
		command -v mmdebstrap >/dev/null || { echo "build-image: mmdebstrap is required (apt-get install mmdebstrap)" >&2; exit 1; }
		[ "$(id -u)" -eq 0 ] || { echo "build-image: run as root (mmdebstrap's root mode)" >&2; exit 1; }
		echo "build-image: building the $kind root filesystem ($key), once" >&2
		printf '%s\n' "$recipe" >"$cache/rootfs-$kind-$key.recipe"
		pkglist="$(IFS=,; echo "${packages[*]}")"
		mmdebstrap --mode=root --variant=minbase --format=tar --include="$pkglist" \
			--aptopt='Acquire::Retries "3"' "${slim[@]}" "${hooks[@]}" \
			"$suite" "$rootfs.tmp" "${mirrors[@]}"
		mv "$rootfs.tmp" "$rootfs"
	else
		echo "build-image: root filesystem $rootfs (cached)" >&2
	fi

	pack=(go run ./deploy/image -out "$out" -tag "$tag" -cache "$cache/blobs" -layer "$rootfs"
		-env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin)
	case $kind in
	app)
		if [ -n "${CODECAGE_BINARY:-}" ]; then
			bin="$CODECAGE_BINARY" # prebuilt (static: scripts/build.sh)
		else
			workdir="$(mktemp -d)"
			bin="$workdir/codecage"
			scripts/build.sh "$bin"
		fi
		# Same configuration as deploy/Dockerfile.
		pack+=(-file "$bin:/usr/local/bin/codecage:0755"
			-env SANDBOX_STATE_DIR=/var/lib/codecage -env XDG_STATE_HOME=/var/lib
			-entrypoint '["/usr/bin/tini","--","/usr/local/bin/codecage"]'
			-cmd '["serve","--listen","0.0.0.0:8001"]'
			-expose 8001/tcp -workdir /)
		;;
	postgres)
		pack+=(-file "deploy/image/postgres-entrypoint.sh:/usr/local/bin/postgres-entrypoint:0755"
			-env PGDATA=/var/lib/postgresql/data
			-entrypoint '["/usr/bin/tini","--","/usr/local/bin/postgres-entrypoint"]'
			-expose 5432/tcp -stopsignal SIGINT)
		;;
	base)
		pack+=(-cmd '["bash"]')
		;;
	esac
	# Image and file times: the last commit's, so a rebuild of the same tree
	# gives the same image.
	SOURCE_DATE_EPOCH="${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || echo 0)}" "${pack[@]}"
	echo "build-image: $out ($tag, $(du -h "$out" | cut -f1))" >&2
	echo "$tag"
}

workdir=""
trap '[ -z "$workdir" ] || rm -rf "$workdir"' EXIT
main "$@"; exit
