package jail

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// OpenRootDir opens dir (absolute, in the sandbox's terms) as the
// sandbox's processes see it, its overlays merged (a machine's /usr and
// /etc), for the file API to read. It goes through the init's /proc
// entry, and is resolved in the sandbox's own root (RESOLVE_IN_ROOT: a
// link there cannot lead to the host's tree). The init's pidfd, taken
// before it could be reaped and still alive once that entry is open,
// proves the entry was the sandbox's and not a process's that took its
// pid after it ended. ErrEnded when the sandbox is gone.
func (s *Sandbox) OpenRootDir(dir string) (*os.File, error) {
	pidfd, err := s.dupPidfd() // port_linux.go
	if err != nil {
		return nil, err
	}
	defer unix.Close(pidfd)
	root, err := unix.Open(fmt.Sprintf("/proc/%d/root", s.cmd.Process.Pid), unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, ErrEnded
	}
	defer unix.Close(root)
	if unix.PidfdSendSignal(pidfd, 0, nil, 0) != nil {
		return nil, ErrEnded
	}
	return OpenInRoot(root, dir)
}
