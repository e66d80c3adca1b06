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

	"github.com/codecage/codecage/internal/envfixture"
	"github.com/codecage/codecage/internal/envstore"
	"github.com/codecage/codecage/internal/service"
)

// An image whose libsqlite3.so.0 (a library only the sqlite3 extension
// needs) and one /etc/ld.so.conf.d file are FIFOs: the server, resolving
// the command jail of a session in it, never opens either for reading,
// so its commands run (without that library) within a bound, and a
// command of another tenant in another environment completes meanwhile.
// Before, the first command there left a server thread blocked in openat2
// for ever, holding the lock every environment's commands take.
func TestFIFOInARootHangsNoCommand(t *testing.T) {
	cfg, root, pack := imageRoot(t)
	libs, _ := filepath.Glob(filepath.Join(root, "usr/lib/*/libsqlite3.so.0"))
	if len(libs) != 1 {
		t.Fatalf("the host's Python has no sqlite3 extension with its own library (Debian's has): %v", libs)
	}
	lib := strings.TrimPrefix(libs[0], root)
	fifos := []string{lib, "/etc/ld.so.conf.d/fifo.conf"}
	for _, p := range fifos {
		os.Remove(filepath.Join(root, p))
		if err := syscall.Mkfifo(filepath.Join(root, p), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	archive := pack()
	commitEnvironment(t, cfg.StateDir, envstore.Env{Name: "plain"}, envfixture.MinimalPythonRoot)
	svc := newServiceWith(t, cfg)
	ctx := context.Background()
	fifoEnv, err := svc.BuildEnvironment(ctx, service.EnvironmentBuild{Name: "fifo", Image: archive})
	if err != nil {
		t.Fatalf("the image with FIFOs: %v", err)
	}
	// Whatever the outcome, nothing of this test stays blocked on the FIFO
	// (a reader waiting in open returns once a writer opens it).
	release := func() {
		for _, p := range fifos {
			if fd, err := syscall.Open(filepath.Join(fifoEnv.RootDir, p), syscall.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
				syscall.Close(fd)
			}
		}
	}
	session := func(env string) string {
		info, err := svc.CreateSession(ctx, service.SessionRequest{Environment: env, Owner: env})
		if err != nil {
			t.Fatalf("session in %s: %v", env, err)
		}
		t.Cleanup(func() { svc.CloseSession(ctx, info.ID, env) })
		return info.ID
	}
	inFIFO, inPlain := session("fifo"), session("plain")

	type outcome struct {
		res *service.CommandResult
		err error
	}
	fifoDone := make(chan outcome, 1)
	go func() {
		res, err := svc.RunCommand(ctx, service.CommandRequest{SessionID: inFIFO, Owner: "fifo",
			Command: "echo in-fifo; python3 -c 'import sqlite3'", Timeout: 30 * time.Second})
		fifoDone <- outcome{res, err}
	}()
	// The FIFO environment's command either ends, or is stuck in an open
	// of the FIFO (a thread of ours in openat2, syscall 437): then the
	// other tenant's command must still complete.
	var fifo *outcome
	deadline := time.Now().Add(60 * time.Second)
	for fifo == nil && !threadInSyscall(437) {
		select {
		case o := <-fifoDone:
			fifo = &o
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatal("the FIFO environment's command neither ended nor opened anything in 60 s")
		}
	}
	plainDone := make(chan outcome, 1)
	go func() {
		res, err := svc.RunCommand(ctx, service.CommandRequest{SessionID: inPlain, Owner: "plain", Command: "echo in-plain", Timeout: 30 * time.Second})
		plainDone <- outcome{res, err}
	}()
	select {
	case o := <-plainDone:
		if o.err != nil || !o.res.Success || o.res.Stdout != "in-plain\n" {
			t.Fatalf("the other environment's command: %v %+v", o.err, o.res)
		}
	case <-time.After(60 * time.Second):
		for fifo == nil {
			release()
			select {
			case o := <-fifoDone:
				fifo = &o
			case <-time.After(20 * time.Millisecond):
			}
		}
		<-plainDone
		t.Fatalf("another environment's command did not complete in 60 s while a command resolved the FIFO environment's root (its command then: %v)", fifo.err)
	}
	if fifo == nil {
		select {
		case o := <-fifoDone:
			fifo = &o
		case <-time.After(60 * time.Second):
			for fifo == nil {
				release()
				select {
				case o := <-fifoDone:
					fifo = &o
				case <-time.After(20 * time.Millisecond):
				}
			}
			t.Fatalf("the FIFO environment's command did not end within 60 s (it ended once the FIFO had a writer: %v)", fifo.err)
		}
	}
	// It ran, without the FIFO: sqlite3 cannot load its library there.
	if fifo.err != nil {
		t.Fatalf("a command in the FIFO environment: %v", fifo.err)
	}
	if r := fifo.res; r.Stdout != "in-fifo\n" || r.ExitCode == 0 || !strings.Contains(r.Stderr, "libsqlite3.so.0") {
		t.Fatalf("a command in the FIFO environment: exit %d, stdout %q, stderr %q", r.ExitCode, r.Stdout, r.Stderr)
	}
}

// threadInSyscall reports whether a thread of this process is blocked in
// system call nr (as /proc shows it: its number first).
func threadInSyscall(nr int) bool {
	tasks, _ := os.ReadDir("/proc/self/task")
	for _, task := range tasks {
		b, err := os.ReadFile("/proc/self/task/" + task.Name() + "/syscall")
		if err == nil && strings.HasPrefix(string(b), strconv.Itoa(nr)+" ") {
			return true
		}
	}
	return false
}
