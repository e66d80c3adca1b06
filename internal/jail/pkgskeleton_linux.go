package jail

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"golang.org/x/sys/unix"
)

// A machine whose /usr is root's to write (usroverlay_linux.go) gets what
// dpkg and apt-get expect to find, as a Debian computer has it: their
// state under /var, made in the machine's own root when missing (kept
// from then on, with the rest of the root), and /etc/apt's directories
// in the /etc the init makes at each start. The machine's package
// database starts as the host's status file, which describes the /usr it
// sees (what /usr/share/doc shows anyway): apt then installs a package
// whose dependencies the system has, as on the computer it copies. Only
// the status: the files lists and scripts of info/ stay the host's, and
// statoverride names the host's users.

// pkgStateDirs and pkgStateFiles are made under the machine's root.
var (
	pkgStateDirs = []string{"var/lib/dpkg/info", "var/lib/dpkg/updates", "var/lib/dpkg/alternatives",
		"var/lib/apt/lists/partial", "var/cache/apt/archives/partial", "var/log/apt"}
	pkgStateFiles = []string{"var/lib/dpkg/status", "var/lib/dpkg/available"}
	aptEtcDirs    = []string{"apt/apt.conf.d", "apt/preferences.d", "apt/sources.list.d", "apt/trusted.gpg.d", "apt/auth.conf.d", "apt/keyrings"}
)

// hostPkgStatus is the host's dpkg status file.
const hostPkgStatus = "/var/lib/dpkg/status"

// maxPkgStatus bounds the copy: a bigger database is not copied in part
// (dpkg would read a cut one as corrupt); the machine's starts empty.
const maxPkgStatus = 64 << 20

// openHostPkgStatus opens the host's status file for a machine's init, or
// nil when there is none (not a Debian host) or it is not a plain file.
func openHostPkgStatus() *os.File {
	fd, err := unix.Open(hostPkgStatus, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		return nil
	}
	var st unix.Stat_t
	if unix.Fstat(fd, &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
		_ = unix.Close(fd)
		return nil
	}
	return os.NewFile(uintptr(fd), hostPkgStatus)
}

// takeUsrFiles sorts the descriptors that came with an init's
// configuration: /usr's tree first, then, when withStatus, the host's
// status file; -1 for what is missing, and any other is closed.
func takeUsrFiles(fds []int, withStatus bool) (usrTree, pkgStatus int) {
	usrTree, pkgStatus = -1, -1
	if len(fds) > 0 {
		usrTree, fds = fds[0], fds[1:]
	}
	if withStatus && len(fds) > 0 {
		pkgStatus, fds = fds[0], fds[1:]
	}
	for _, fd := range fds {
		_ = unix.Close(fd)
	}
	return usrTree, pkgStatus
}

// seedPkgStatus fills the machine's status file, just made (file), from
// the host's (from): all of it, or nothing past maxPkgStatus. Raw
// reads and writes: both descriptors stay their callers'.
func seedPkgStatus(file, from int) error {
	buf := make([]byte, 1<<16)
	total := 0
	for {
		n, err := unix.Read(from, buf)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return err
		}
		if n == 0 {
			return nil
		}
		if total += n; total > maxPkgStatus {
			return unix.Ftruncate(file, 0)
		}
		for b := buf[:n]; len(b) > 0; {
			w, err := unix.Write(file, b)
			if err != nil && !errors.Is(err, unix.EINTR) {
				return err
			}
			b = b[max(w, 0):]
		}
	}
}

// placePackageState makes what is missing of the package managers'
// state in the machine's root (at newRoot), as root inside's, a new
// status file from hostStatus (the host's, or -1).
func placePackageState(hostStatus int) error { return packageStateIn(newRoot, hostStatus) }

// PlacePackageState makes the package managers' state, seeded with the
// host's status, in a gVisor machine's root at dir, as the caller's
// (who gives it to root inside).
func PlacePackageState(dir string) error {
	status := -1
	if f := openHostPkgStatus(); f != nil {
		defer f.Close()
		status = int(f.Fd())
	}
	return packageStateIn(dir, status)
}

// packageStateIn is placePackageState in the root at dir. The root is the
// code's to have changed: a link or a file where a directory should be
// is left as it is (never followed), and that path skipped.
func packageStateIn(dir string, hostStatus int) error {
	root, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
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
			if name == "status" && hostStatus >= 0 {
				err = seedPkgStatus(file, hostStatus)
			}
			_ = unix.Close(file)
			if err != nil {
				return fmt.Errorf("package state %s: %w", f, err)
			}
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
