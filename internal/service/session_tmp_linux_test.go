package service_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/codecage/codecage/internal/config"
	"github.com/codecage/codecage/internal/policy"
	"github.com/codecage/codecage/internal/service"
)

// A session has one /tmp, as a machine has: its commands and its
// interpreter share it (E2B's `echo hi > /tmp/f` then `cat /tmp/f`).
// Judged from the host: it lives under the session's state, as the
// session's uid, another session's /tmp does not hold it, and it is gone
// (unmounted and removed) once the session closes.
func TestSessionTmpIsSharedAndPrivate(t *testing.T) {
	if testBackend(t) != config.IsolationNative {
		t.Skip("a gVisor session's /tmp is its sandbox's own, kept in its memory image")
	}
	cfg := service.LeanTestConfig()
	cfg.AllowedImports = []string{policy.AllImports}
	cfg.StateDir = t.TempDir()
	cfg.SessionPoolSize = 0
	cfg.MachinePoolSize = 0
	svc := newServiceWith(t, cfg)
	ctx := context.Background()
	a, err := svc.CreateSession(ctx, service.SessionRequest{Owner: "o"})
	if err != nil {
		t.Fatal(err)
	}
	b, err := svc.CreateSession(ctx, service.SessionRequest{Owner: "o"})
	if err != nil {
		t.Fatal(err)
	}
	if r := runCmd(t, svc, service.CommandRequest{SessionID: a.ID, Owner: "o", Command: "echo hi > /tmp/f"}); !r.Success {
		t.Fatalf("write: %+v", r)
	}
	if r := runCmd(t, svc, service.CommandRequest{SessionID: a.ID, Owner: "o", Command: "cat /tmp/f"}); !r.Success || r.Stdout != "hi\n" {
		t.Fatalf("a later command does not see /tmp/f: %+v", r)
	}
	res, err := svc.Execute(ctx, service.Request{SessionID: a.ID, Owner: "o", Code: "open('/tmp/g', 'w').write('from python'); open('/tmp/f').read()"})
	if err != nil || !res.Success || !strings.Contains(string(res.Result), "hi") {
		t.Fatalf("the interpreter does not see the command's /tmp/f: %v %+v", err, res)
	}
	if r := runCmd(t, svc, service.CommandRequest{SessionID: a.ID, Owner: "o", Command: "cat /tmp/g"}); !r.Success || r.Stdout != "from python" {
		t.Fatalf("a command does not see the interpreter's /tmp/g: %+v", r)
	}
	// From the host: the files are in a's /tmp, under its state, as its uid.
	tmpA := filepath.Join(cfg.StateDir, "sessions", a.ID+".tmp")
	tmpB := filepath.Join(cfg.StateDir, "sessions", b.ID+".tmp")
	fi, err := os.Stat(filepath.Join(tmpA, "f"))
	if err != nil {
		t.Fatalf("a's /tmp/f is not in its host directory: %v", err)
	}
	if uid := fi.Sys().(*syscall.Stat_t).Uid; uid == 0 {
		t.Fatalf("a's /tmp/f belongs to root")
	}
	if !mounted(t, tmpA) {
		t.Fatalf("a's /tmp is not a size-capped tmpfs of its own")
	}
	// Never shared: b sees none of it, and the host's b directory holds none.
	if _, err := os.Stat(filepath.Join(tmpB, "f")); !os.IsNotExist(err) {
		t.Fatalf("b's host /tmp holds a's file: %v", err)
	}
	if r := runCmd(t, svc, service.CommandRequest{SessionID: b.ID, Owner: "o", Command: "ls -A /tmp"}); !r.Success || r.Stdout != "" {
		t.Fatalf("b's /tmp is not empty: %+v", r)
	}
	res, err = svc.Execute(ctx, service.Request{SessionID: b.ID, Owner: "o", Code: "import os; sorted(os.listdir('/tmp'))"})
	if err != nil || !res.Success || strings.Contains(string(res.Result), "'f'") || strings.Contains(string(res.Result), "'g'") {
		t.Fatalf("b's interpreter sees a's /tmp: %v %+v", err, res)
	}
	// The cap: a's /tmp is as large as a sandbox's own, no larger.
	r := runCmd(t, svc, service.CommandRequest{SessionID: a.ID, Owner: "o", Command: "head -c 100000000 /dev/zero > /tmp/big"})
	if r.Success {
		t.Fatalf("a /tmp file past SANDBOX_TMP_SIZE was written: %+v", r)
	}
	if err := svc.CloseSession(ctx, a.ID, "o"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(tmpA); !os.IsNotExist(err) {
		t.Fatalf("a's /tmp is still on the host after close: %v", err)
	}
	if mounted(t, tmpA) {
		t.Fatalf("a's /tmp is still mounted after close")
	}
}

// mounted reports whether dir is a mount point on the host.
func mounted(t *testing.T, dir string) bool {
	t.Helper()
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) > 4 && f[4] == dir {
			return true
		}
	}
	return false
}
