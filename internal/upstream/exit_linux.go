package upstream

import "golang.org/x/sys/unix"

// watchExit waits for the leader to exit without reaping it.
func (p *process) watchExit() {
	defer close(p.exited)
	var info unix.Siginfo
	for {
		err := unix.Waitid(unix.P_PID, p.cmd.Process.Pid, &info, unix.WEXITED|unix.WNOWAIT, nil)
		if err != unix.EINTR {
			return
		}
	}
}
