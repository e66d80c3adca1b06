//go:build linux

package seccomp

import (
	"errors"
	"os/exec"
	"strings"
	"syscall"
	"testing"
)

// The x32 ABI exists only on amd64, so this test is built only there.
func TestInstallKillsX32(t *testing.T) {
	out, err := runChildProcess(t, "x32")
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		t.Fatalf("child was not killed (err %v), output:\n%s", err, out)
	}
	ws, ok := ee.Sys().(syscall.WaitStatus)
	if !ok || !ws.Signaled() || ws.Signal() != syscall.SIGSYS {
		t.Fatalf("child exit %v, want death by SIGSYS; output:\n%s", ee, out)
	}
	if !strings.Contains(out, "installed") {
		t.Fatalf("child died before installing the filter; output:\n%s", out)
	}
}
