package jail

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// A sandbox cgroup is named after its supervisor's pid (cgroupName). That
// pid alone cannot say whether the process now holding it made the
// cgroup: a supervisor killed by SIGKILL leaves its cgroups, and its pid
// may go to any process later (a restarted container's server very
// likely gets the same one). So every codecage process that makes
// cgroups holds an exclusive flock on <supervisorDir>/<pid>.lock from
// before its first cgroup until it dies, when the kernel drops the lock.

// supervisorDir holds the supervisors' lock files, beside the uid leases
// (every codecage of a host sees that directory).
func supervisorDir() string { return filepath.Join(filepath.Dir(UIDLeaseDir), "supervisors") }

// supervisorLock is this process's, held for its life.
var supervisorLock *os.File

// holdSupervisorLock takes this process's lock; without it (a directory
// this user may not make, rootless) its cgroups are judged by its pid
// alone, as an older codecage's are.
func holdSupervisorLock() {
	dir := supervisorDir()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return
	}
	path := filepath.Join(dir, strconv.Itoa(os.Getpid())+".lock")
	for range 50 {
		f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|syscall.O_NOFOLLOW, 0o600)
		if err != nil {
			return
		}
		// A process judging the lock holds it for a moment; one that
		// holds it longer is a codecage with this pid in another pid
		// namespace sharing the directory: never wait on it for good.
		if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
			f.Close()
			if !errors.Is(err, unix.EWOULDBLOCK) {
				return
			}
			time.Sleep(2 * time.Millisecond)
			continue
		}
		// A reaper may have removed the file of a dead holder between
		// the open and the lock: the lock must be on the file there now.
		var held, there unix.Stat_t
		if unix.Fstat(int(f.Fd()), &held) == nil && unix.Stat(path, &there) == nil && held.Ino == there.Ino && held.Dev == there.Dev {
			supervisorLock = f
			return
		}
		f.Close()
	}
}

// supervisorState is what the lock file of pid says about the cgroups
// named after pid.
type supervisorState int

const (
	supervisorUnknown supervisorState = iota // no lock file: an older codecage's, or none
	supervisorLive                           // locked: a live codecage made them
	supervisorDead                           // unlocked: the codecage that made them is dead
)

// supervisorOf judges pid's lock file. Call it after listing the cgroups:
// a supervisor locks its file before it makes its first cgroup.
func supervisorOf(pid int) supervisorState {
	f, err := os.OpenFile(filepath.Join(supervisorDir(), strconv.Itoa(pid)+".lock"), os.O_RDWR|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return supervisorUnknown
	}
	defer f.Close() // drops the lock taken below
	switch err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); {
	case err == nil:
		return supervisorDead
	case errors.Is(err, unix.EWOULDBLOCK):
		return supervisorLive
	}
	return supervisorUnknown
}

// removeDeadSupervisorLock removes pid's lock file once pid runs no
// more and no one holds it (its holder re-checks the file after locking).
func removeDeadSupervisorLock(pid int) {
	path := filepath.Join(supervisorDir(), strconv.Itoa(pid)+".lock")
	f, err := os.OpenFile(path, os.O_RDWR|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return
	}
	defer f.Close()
	if unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB) == nil {
		_ = os.Remove(path)
	}
}
