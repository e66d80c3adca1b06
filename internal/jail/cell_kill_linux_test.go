package jail

import (
	"context"
	"os/exec"
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
