package jail

import (
	"errors"
	"fmt"
	"strings"

	"golang.org/x/sys/unix"
)

// A machine whose /usr is root's to write (usroverlay_linux.go) gets what
// dpkg and apt-get expect to find, as a Debian computer has it: their
// state under /var, made in the machine's own root when missing (kept
// from then on, with the rest of the root), and /etc/apt's directories
// in the /etc the init makes at each start. The machine's package
// database starts empty: the host's is not the machine's to read.

// pkgStateDirs and pkgStateFiles are made under the machine's root.
var (
	pkgStateDirs = []string{"var/lib/dpkg/info", "var/lib/dpkg/updates", "var/lib/dpkg/alternatives",
		"var/lib/apt/lists/partial", "var/cache/apt/archives/partial", "var/log/apt"}
	pkgStateFiles = []string{"var/lib/dpkg/status", "var/lib/dpkg/available"}
	aptEtcDirs    = []string{"apt/apt.conf.d", "apt/preferences.d", "apt/sources.list.d", "apt/trusted.gpg.d", "apt/auth.conf.d", "apt/keyrings"}
)

// placePackageState makes what is missing of the package managers'
// state in the machine's root (at newRoot), as root inside's. The root
// is the code's to have changed: a link or a file where a directory
// should be is left as it is (never followed), and that path skipped.
func placePackageState() error {
	root, err := unix.Open(newRoot, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(root)
	for _, d := range pkgStateDirs {
		fd, err := mkdirsBeneath(root, d)
		if err != nil {
			return fmt.Errorf("package state %s: %w", d, err)
		}
		if fd >= 0 {
			_ = unix.Close(fd)
		}
	}
	for _, f := range pkgStateFiles {
		dir, name := f[:strings.LastIndex(f, "/")], f[strings.LastIndex(f, "/")+1:]
		fd, err := mkdirsBeneath(root, dir)
		if err != nil || fd < 0 {
			if err != nil {
				return fmt.Errorf("package state %s: %w", f, err)
			}
			continue
		}
		file, err := unix.Openat(fd, name, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o644)
		_ = unix.Close(fd)
		switch {
		case err == nil:
			_ = unix.Close(file)
		case !errors.Is(err, unix.EEXIST):
			return fmt.Errorf("package state %s: %w", f, err)
		}
	}
	return nil
}

// mkdirsBeneath makes each directory of rel under dir that is missing
// (mode 0755, the caller's) and opens the last; -1 and no error when a
// component is there but not a directory (a link is not followed).
func mkdirsBeneath(dir int, rel string) (int, error) {
	at, err := unix.Dup(dir)
	if err != nil {
		return -1, err
	}
	for _, name := range strings.Split(rel, "/") {
		if err := unix.Mkdirat(at, name, 0o755); err != nil && !errors.Is(err, unix.EEXIST) {
			_ = unix.Close(at)
			return -1, err
		}
		next, err := unix.Openat(at, name, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		_ = unix.Close(at)
		switch {
		case errors.Is(err, unix.ENOTDIR), errors.Is(err, unix.ELOOP):
			return -1, nil
		case err != nil:
			return -1, err
		}
		at = next
	}
	return at, nil
}
