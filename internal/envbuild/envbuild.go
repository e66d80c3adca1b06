// Package envbuild runs the host tools that turn a recipe into a root
// filesystem or an OCI image: mmdebstrap for Debian packages, buildah for
// a Dockerfile. Each build runs with no network but the package index or
// registry it names. The envstore then unpacks and records the result.
package envbuild
