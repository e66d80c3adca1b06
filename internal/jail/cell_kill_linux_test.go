package jail

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// startPidfd starts a process and returns it with a pidfd of it.
func startPidfd(t *testing.T, argv ...string) (*exec.Cmd, int) {
	t.Helper()
	cmd := exec.Command(argv[0], argv[1:]...)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	fd, err := unix.PidfdOpen(cmd.Process.Pid, 0)
	if err != nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		t.Fatal(err)
	}
	return cmd, fd
}

// A cell closes its pidfd when it ends; a Kill after that (a pool
// destroying a dead cell, a run finishing one that just ended) must not
// signal the process that a reused descriptor number now refers to.
func TestCellKillAfterEndSignalsNothingElse(t *testing.T) {
	if ProbeHost().CgroupVersion() == 0 {
		t.Fatalf("this test runs where cgroups are available: %s", ProbeHost().CgroupReason())
	}
	cell, err := NewCell(NewID(), Limits{Timeout: 10 * time.Second}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	cell.ClosePassed()
	first, fd := startPidfd(t, "/bin/sleep", "0.2")
	if err := cell.Attach(context.Background(), fd); err != nil {
		t.Fatal(err)
	}
	_ = first.Wait()
	select {
	case <-cell.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the cell did not end")
	}
	// Descriptors of another process, up to the number the cell closed.
	other, otherFd := startPidfd(t, "/bin/sleep", "30")
	defer func() { _ = other.Process.Kill(); _ = other.Wait() }()
	fds := []int{otherFd}
	for otherFd != fd && len(fds) < 64 {
		if otherFd, err = unix.PidfdOpen(other.Process.Pid, 0); err != nil {
			t.Fatal(err)
		}
		fds = append(fds, otherFd)
	}
	defer func() {
		for _, f := range fds {
			unix.Close(f)
		}
	}()
	if otherFd != fd {
		t.Fatalf("could not get descriptor %d reused: the test proves nothing", fd)
	}
	cell.Kill(LimitNone)
	p := []unix.PollFd{{Fd: int32(otherFd), Events: unix.POLLIN}}
	if n, _ := unix.Poll(p, 200); n > 0 {
		t.Fatal("a Kill after the cell ended killed another process")
	}
}

// startCellProcess starts argv (in a pid namespace of its own if newPidNS)
// as a cell's first process and attaches it.
func startCellProcess(t *testing.T, newPidNS bool, argv ...string) (*Cell, *exec.Cmd) {
	t.Helper()
	cell, err := NewCell(NewID(), Limits{Timeout: 20 * time.Second}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	cell.ClosePassed()
	// The process waits for its cell (a line on stdin) before it runs argv.
	cmd := exec.Command("/bin/sh", append([]string{"-c", `read go; exec "$@"`, "sh"}, argv...)...)
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if newPidNS {
		cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: unix.CLONE_NEWPID}
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	fd, err := unix.PidfdOpen(cmd.Process.Pid, 0)
	if err != nil {
		t.Fatal(err)
	}
	if got := pidnsInit(fd, cmd.Process.Pid); got != newPidNS {
		t.Fatalf("pidnsInit %v for a process in a new pid namespace: %v", got, newPidNS)
	}
	if err := cell.Attach(context.Background(), fd); err != nil {
		t.Fatal(err)
	}
	if _, err := in.Write([]byte("go\n")); err != nil {
		t.Fatal(err)
	}
	return cell, cmd
}

// waitEmpty waits until no task is left in the cell's cgroup (or the
// cgroup is gone).
func waitEmpty(t *testing.T, cell *Cell, what string) {
	t.Helper()
	dir := cell.cg.dirs["pids"]
	if cell.cg.version == 2 {
		dir = cell.cg.dirs[""]
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		b, err := os.ReadFile(filepath.Join(dir, "pids.current"))
		if os.IsNotExist(err) || strings.TrimSpace(string(b)) == "0" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %s tasks left in the cell's cgroup (%v)", what, b, err)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// What the first process leaves behind is killed when it ends; when it is
// the init of its pid namespace, the kernel does it, and a Kill of the
// init is a Kill of the whole cell.
func TestCellEndKillsWhatTheFirstProcessLeft(t *testing.T) {
	if ProbeHost().CgroupVersion() == 0 {
		t.Fatalf("this test runs where cgroups are available: %s", ProbeHost().CgroupReason())
	}
	// Not an init: the cgroup is killed.
	cell, cmd := startCellProcess(t, false, "/bin/sh", "-c", "sleep 30 & exit 0")
	_ = cmd.Wait()
	cell.Wait()
	waitEmpty(t, cell, "a plain first process")

	// An init: its end is the namespace's.
	cell, cmd = startCellProcess(t, true, "/bin/sh", "-c", "sleep 30 & sleep 30")
	for deadline := time.Now().Add(10 * time.Second); cell.cg.readIntOK(cgPidsCurrent) < 3; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d tasks in the cell 10 s after its start: the test proves nothing", cell.cg.readIntOK(cgPidsCurrent))
		}
	}
	cell.Kill(LimitNone)
	_ = cmd.Wait()
	if e := cell.Wait(); e.Limit != LimitNone {
		t.Fatalf("exit %+v", e)
	}
	waitEmpty(t, cell, "a pid namespace's init")
}
