package jail

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Pausing without a cgroup freezer: a container without writable cgroups
// (a pod with hostUsers: false, cgroup v1 without the freezer) still
// pauses a sandbox, by stopping each of its processes (SIGSTOP, which no
// process can catch) and continuing them on resume. The processes are
// those of the sandbox's pid namespace, found in /proc; each is signalled
// through a pidfd checked to be in that namespace, so a pid reused by
// another process is never hit. Unlike the freezer, a parent inside may
// see its child stopped (waitpid with WUNTRACED), and SIGCONT runs a
// handler the code installed.

// stopWait bounds how long stopping every process may take: a process in
// an uninterruptible sleep stops when it leaves it.
const stopWait = 2 * time.Second

// signalPidNS sends sig to every process in pid namespace ns (its inode)
// and, with sig SIGSTOP, repeats until all of them are stopped at once
// (one not yet stopped could continue another). It returns how many it
// saw.
func signalPidNS(ns uint64, sig unix.Signal) (int, error) {
	deadline := time.Now().Add(stopWait)
	for {
		procs, err := pidsInNS(ns)
		if err != nil {
			return 0, err
		}
		moving := 0
		for _, pid := range procs {
			if sig == unix.SIGSTOP && stopped(pid) {
				continue
			}
			moving++
			if err := signalInNS(pid, ns, sig); err != nil {
				return 0, err
			}
		}
		if sig != unix.SIGSTOP || moving == 0 {
			return len(procs), nil
		}
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("jail: %d processes did not stop within %s", moving, stopWait)
		}
		time.Sleep(time.Millisecond) // the stop lands when each is next scheduled
	}
}

// pidNSOf is the inode of pid's pid namespace.
func pidNSOf(pid int) (uint64, error) {
	var st unix.Stat_t
	if err := unix.Stat("/proc/"+strconv.Itoa(pid)+"/ns/pid", &st); err != nil {
		return 0, err
	}
	return st.Ino, nil
}

// pidsInNS lists the processes in pid namespace ns.
func pidsInNS(ns uint64) ([]int, error) {
	d, err := os.Open("/proc")
	if err != nil {
		return nil, err
	}
	defer d.Close()
	names, err := d.Readdirnames(-1)
	if err != nil {
		return nil, err
	}
	var out []int
	for _, n := range names {
		pid, err := strconv.Atoi(n)
		if err != nil {
			continue
		}
		if in, err := pidNSOf(pid); err == nil && in == ns {
			out = append(out, pid)
		}
	}
	return out, nil
}

// stopped reports whether pid is stopped, or gone (a zombie, dead).
func stopped(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return true
	}
	// The state follows the command's closing parenthesis.
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 || i+2 >= len(b) {
		return true
	}
	switch b[i+2] {
	case 'T', 't', 'Z', 'X':
		return true
	}
	return false
}

// signalInNS signals pid through a pidfd, once pid is known to be in ns:
// the pidfd pins the process, so a pid reused meanwhile is not signalled.
func signalInNS(pid int, ns uint64, sig unix.Signal) error {
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		if errors.Is(err, unix.ESRCH) {
			return nil
		}
		return fmt.Errorf("jail: pidfd of %d: %w", pid, err)
	}
	defer unix.Close(fd)
	if in, err := pidNSOf(pid); err != nil || in != ns {
		return nil // gone, or the pid is another process's now
	}
	if err := unix.PidfdSendSignal(fd, sig, nil, 0); err != nil && !errors.Is(err, unix.ESRCH) {
		return fmt.Errorf("jail: signal %d: %w", pid, err)
	}
	return nil
}
