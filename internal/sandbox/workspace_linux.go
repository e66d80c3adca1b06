package sandbox

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// mountWorkspace puts a size-capped tmpfs on dir when we may (root): the
// code's writes and the file API's then share one quota the kernel keeps.
// Rootless, dir stays a plain directory and only the file API checks sizes.
func mountWorkspace(dir string, size int64) error {
	if os.Geteuid() != 0 {
		return nil
	}
	// 0711 until the sandbox starts and the workspace is given to its uid:
	// the init must be able to enter it.
	opts := fmt.Sprintf("size=%d,nr_inodes=65536,mode=0711", size)
	if err := unix.Mount("tmpfs", dir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, opts); err != nil {
		return fmt.Errorf("mount workspace tmpfs: %w", err)
	}
	return nil
}

// removeWorkspace unmounts (if mounted) and removes a workspace.
func removeWorkspace(dir string) {
	_ = unix.Unmount(dir, unix.MNT_DETACH)
	_ = os.RemoveAll(dir)
}
