package service_test

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/codecage/codecage/internal/config"
	"github.com/codecage/codecage/internal/jail"
	"github.com/codecage/codecage/internal/service"
)

// hostProcessesWithCmdline lists the host processes of sandbox uids whose
// command line is want.
func hostProcessesWithCmdline(want string) []string {
	var found []string
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil || strings.ReplaceAll(strings.TrimRight(string(b), "\x00"), "\x00", " ") != want {
			continue
		}
		fi, err := os.Stat(filepath.Join("/proc", e.Name()))
		if err != nil {
			continue
		}
		if uid := int(fi.Sys().(*syscall.Stat_t).Uid); uid >= jail.HostUIDBase && uid < jail.HostUIDBase+jail.HostUIDCount {
			found = append(found, e.Name())
		}
	}
	return found
}

// TestGVisorSessionCommandsRunUnderGVisor: run_command in a gVisor session
// runs under gVisor, not on the host's kernel (no host process is the
// command), and its allow-list holds there: a program off the list is
// refused, and a binary uploaded into the workspace runs neither directly
// nor through the loader.
func TestGVisorSessionCommandsRunUnderGVisor(t *testing.T) {
	svc := containerService(t)
	ctx := context.Background()
	info, err := svc.CreateSession(ctx, service.SessionRequest{Owner: "o", UseContainer: true})
	if err != nil {
		t.Fatal(err)
	}
	if info.Backend != "gvisor" {
		t.Fatalf("session backend %q", info.Backend)
	}
	// A command that runs for a while, with an argument no other sandbox
	// uses: the host would show it were it a host process.
	nap := []string{"python3", "-c", "import time; time.sleep(3.217)"}
	started := make(chan struct{})
	done := make(chan *service.CommandResult, 1)
	go func() {
		r, err := svc.RunCommand(ctx, service.CommandRequest{SessionID: info.ID, Owner: "o", Argv: nap, OnStart: func() { close(started) }})
		if err != nil {
			t.Error(err)
		}
		done <- r
	}()
	<-started
	// Watched for as long as the command runs, however slow its start.
	seen := map[string]bool{}
	var r *service.CommandResult
	for watching := true; watching; {
		for _, pid := range hostProcessesWithCmdline(strings.Join(nap, " ")) {
			seen[pid] = true
		}
		select {
		case r = <-done:
			watching = false
		case <-time.After(50 * time.Millisecond):
		}
	}
	if len(seen) > 0 {
		t.Fatalf("the gVisor session's command ran as host processes %v", seen)
	}
	if r == nil || !r.Success || r.Backend != "gvisor" {
		t.Fatalf("the command: %+v", r)
	}

	r = runCmd(t, svc, service.CommandRequest{SessionID: info.ID, Owner: "o", Command: "perl -e 'print 1'"})
	if r.Success || r.Error == nil || !strings.Contains(*r.Error, `program "perl" is not allowed`) {
		t.Fatalf("perl: %+v", r)
	}
	ls, err := os.ReadFile("/usr/bin/ls")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := svc.WriteFile(ctx, info.ID, "o", "up", ls); err != nil {
		t.Fatal(err)
	}
	for _, cmd := range []string{
		`python3 -c "import os; os.chmod('up', 0o755)"; ./up /`,
		"/usr/lib64/ld-linux-x86-64.so.2 ./up /",
		"cp up /tmp/up && /usr/lib64/ld-linux-x86-64.so.2 /tmp/up /",
	} {
		r := runCmd(t, svc, service.CommandRequest{SessionID: info.ID, Owner: "o", Command: cmd})
		if r.Success || strings.Contains(r.Stdout, "bin") || r.Stderr == "" || r.Backend != "gvisor" {
			t.Errorf("%q ran: %+v", cmd, r)
		}
	}
	// The allowed programs still work, on the session's files.
	r = runCmd(t, svc, service.CommandRequest{SessionID: info.ID, Owner: "o", Command: "ls /workspace && wc -c < up"})
	if !r.Success || !strings.Contains(r.Stdout, "up\n") || !strings.Contains(r.Stdout, "\n"+strconv.Itoa(len(ls))+"\n") {
		t.Fatalf("ls and wc: %+v", r)
	}
}

// TestOldRunscKeepsCommandsNative: with a runsc whose loader maps code from
// noexec mounts (Debian 12's), the allow-list would not hold under it, so a
// gVisor session's commands stay on the native command jail.
func TestOldRunscKeepsCommandsNative(t *testing.T) {
	const debian = "/usr/bin/runsc"
	svc := containerService(t, func(c *config.Config) { c.Runsc = debian })
	if gv := svc.Info().ContainerMode.GVisor; !gv.Available || gv.EnforcesNoexec {
		t.Fatalf("%s: %+v", debian, gv)
	}
	ctx := context.Background()
	info, err := svc.CreateSession(ctx, service.SessionRequest{Owner: "o", UseContainer: true})
	if err != nil || info.Backend != "gvisor" {
		t.Fatalf("session: %v %+v", err, info)
	}
	r := runCmd(t, svc, service.CommandRequest{SessionID: info.ID, Owner: "o", Command: "cp /usr/bin/ls /tmp/l && /usr/lib64/ld-linux-x86-64.so.2 /tmp/l /"})
	if r.Backend != "native" || r.Success || strings.Contains(r.Stdout, "bin") {
		t.Fatalf("the command: %+v", r)
	}
}
