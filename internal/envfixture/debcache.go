package envfixture

import (
	"os"
	"path/filepath"
)

// DebCache is the .deb cache the tests' Debian builds share, on this
// machine, across packages and runs (SANDBOX_ENV_DEBIAN_CACHE for a
// service, DebianOptions.CacheDir for envbuild): a run downloads each
// package once, and a run after it none. It is the user's cache
// directory, not a temporary one (scripts/go-test-exec.sh gives each
// test binary a TMPDIR of its own); CODECAGE_TEST_DEB_CACHE overrides it.
// apt checks each cached file's hash before it uses it, so a file two
// builds wrote at once is downloaded again, not installed.
func DebCache() string {
	if d := os.Getenv("CODECAGE_TEST_DEB_CACHE"); d != "" {
		return d
	}
	base, err := os.UserCacheDir()
	if err != nil {
		base = os.TempDir()
	}
	return filepath.Join(base, "codecage", "debs")
}
