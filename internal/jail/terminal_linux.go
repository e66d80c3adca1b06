package jail

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// A sandbox's terminal is a pseudo-terminal of a devpts instance of its
// own, mounted by the init at /dev/pts in the sandbox's mount namespace:
// its numbers, its nodes and its limit are the sandbox's, and no path in
// it leads to the host's terminals or another sandbox's. The program gets
// the slave as its controlling terminal (setsid, TIOCSCTTY); the
// supervisor gets the master, over the control socket. TIOCSTI and
// TIOCLINUX stay refused by seccomp: the program cannot type into a
// terminal, its own included.

// devptsOptions: a fresh instance (newinstance is implied since Linux
// 4.7; said for older ones), its ptmx usable by the sandbox's user, and
// few terminals (the program may open more of its own, within these).
const devptsOptions = "newinstance,ptmxmode=0666,mode=0620,max=16"

// mountDevpts mounts the sandbox's devpts under dev (the new root's
// /dev) and points dev/ptmx at its multiplexer.
func mountDevpts(dev string) error {
	pts := dev + "/pts"
	if err := os.Mkdir(pts, 0o755); err != nil {
		return err
	}
	if err := unix.Mount("devpts", pts, "devpts", unix.MS_NOSUID|unix.MS_NOEXEC, devptsOptions); err != nil {
		return fmt.Errorf("mount devpts: %w", err)
	}
	return os.Symlink("pts/ptmx", dev+"/ptmx")
}

// terminal is the init's two ends of the program's terminal.
type terminal struct {
	master, slave int
}

// openTerminal opens a terminal of size in the sandbox's devpts (nil,
// nil when size is nil).
func openTerminal(size *WindowSize) (*terminal, error) {
	if size == nil {
		return nil, nil
	}
	master, err := unix.Open("/dev/pts/ptmx", unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open the terminal: %w", err)
	}
	t := &terminal{master: master, slave: -1}
	if err := unix.IoctlSetPointerInt(master, unix.TIOCSPTLCK, 0); err != nil {
		t.close()
		return nil, fmt.Errorf("unlock the terminal: %w", err)
	}
	if err := unix.IoctlSetWinsize(master, unix.TIOCSWINSZ, &unix.Winsize{Row: size.Rows, Col: size.Cols}); err != nil {
		t.close()
		return nil, fmt.Errorf("size the terminal: %w", err)
	}
	// The slave of this very master, not a path that could name another.
	slave, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(master), unix.TIOCGPTPEER, unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC)
	if errno != 0 {
		t.close()
		return nil, fmt.Errorf("open the terminal's slave: %w", errno)
	}
	t.slave = int(slave)
	return t, nil
}

func (t *terminal) close() {
	if t == nil {
		return
	}
	for _, fd := range []int{t.master, t.slave} {
		if fd >= 0 {
			_ = unix.Close(fd)
		}
	}
	t.master, t.slave = -1, -1
}

// SetWindowSize gives the terminal whose master is f its size (TIOCSWINSZ,
// on which the kernel signals the terminal's foreground group).
func SetWindowSize(f *os.File, size WindowSize) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var ioctlErr error
	if err := rc.Control(func(fd uintptr) {
		ioctlErr = unix.IoctlSetWinsize(int(fd), unix.TIOCSWINSZ, &unix.Winsize{Row: size.Rows, Col: size.Cols})
	}); err != nil {
		return err
	}
	return ioctlErr
}
