package session

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// mountWorkspace puts a size-capped tmpfs on dir when we may (root): the
// code's writes and the file API's then share one quota the kernel keeps.
// Rootless, dir stays a plain directory and only the file API checks sizes
// (with RLIMIT_FSIZE per file in the sandbox). So it does as root without
// CAP_SYS_ADMIN (a container that grants none): codecage doctor says so.
// It reports whether dir is now a tmpfs of its own.
func mountWorkspace(dir string, size int64) (bool, error) {
	if os.Geteuid() != 0 || workspaceMountRefused.Load() {
		return false, nil
	}
	// 0711 until the sandbox starts and the workspace is given to its uid:
	// the init must be able to enter it.
	opts := fmt.Sprintf("size=%d,nr_inodes=65536,mode=0711", size)
	if err := unix.Mount("tmpfs", dir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, opts); err != nil {
		if errors.Is(err, unix.EPERM) {
			if !workspaceMountRefused.Swap(true) {
				slog.Warn("workspaces are plain directories: mounting a tmpfs needs CAP_SYS_ADMIN, which this process lacks (a container without it); the file API still checks sizes, the kernel no longer caps the workspace")
			}
			return false, nil
		}
		return false, fmt.Errorf("mount workspace tmpfs: %w", err)
	}
	return true, nil
}

// workspaceMountRefused: the kernel refused a workspace tmpfs (no
// CAP_SYS_ADMIN); later workspaces do not try again.
var workspaceMountRefused atomic.Bool

// removeWorkspace unmounts (if mounted) and removes a workspace.
func removeWorkspace(dir string) {
	_ = unix.Unmount(dir, unix.MNT_DETACH)
	_ = os.RemoveAll(dir)
}
