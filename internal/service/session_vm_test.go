package service_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/codecage/codecage/internal/config"
	"github.com/codecage/codecage/internal/service"
)

// A session shaped like a VM (what the E2B surface opens): the workspace
// at /home/user, the session's variables, several interpreter contexts.
func TestSessionHomeEnvAndContexts(t *testing.T) {
	svc := sessionService(t)
	ctx := context.Background()
	info, err := svc.CreateSession(ctx, service.SessionRequest{Owner: "alice", Home: "/home/user", Env: map[string]string{"STAGE": "test"},
		Labels: map[string]string{"team": "a"}})
	if err != nil {
		t.Fatal(err)
	}
	if info.Home != "/home/user" || info.Labels["team"] != "a" {
		t.Fatalf("info %+v", info)
	}
	res := inSession(t, svc, info.ID, "alice", "import os\nopen('a.txt', 'w').write('x')\n(os.getcwd(), os.environ['HOME'], os.environ['STAGE'], os.environ['USER'])")
	if got := string(res.Result); !res.Success || got != `["/home/user","/home/user","test","user"]` {
		t.Fatalf("result %s error %+v", got, res.Error)
	}
	exec := func(req service.Request) *service.Result {
		t.Helper()
		req.SessionID, req.Owner = info.ID, "alice"
		res, err := svc.Execute(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		if !res.Success {
			t.Fatalf("%q: %+v", req.Code, res.Error)
		}
		return res
	}
	exec(service.Request{Code: "x = 41"})
	exec(service.Request{Code: "x = 'other'", Context: "c2", NewContext: true, Cwd: "/tmp"})
	if res := exec(service.Request{Code: "x + 1", Display: true}); res.Display["text/plain"] != "42" {
		t.Fatalf("display %v", res.Display)
	}
	res = exec(service.Request{Code: "import os; (x, os.getcwd(), os.environ.get('ONCE'), open('/home/user/a.txt').read())", Context: "c2", Env: map[string]string{"ONCE": "1"}})
	if got := string(res.Result); got != `["other","/tmp","1","x"]` {
		t.Fatalf("context c2: %s", got)
	}
	if _, err := svc.Execute(ctx, service.Request{Code: "1", Context: "c2"}); !errors.Is(err, service.ErrInvalidRequest) {
		t.Fatalf("a context outside a session: %v", err)
	}
	if _, err := svc.Execute(ctx, service.Request{SessionID: info.ID, Owner: "alice", Code: "1", Context: "a b"}); !errors.Is(err, service.ErrInvalidRequest) {
		t.Fatalf("a bad context name: %v", err)
	}

	// Commands see the same home, variables and files.
	cres, err := svc.RunCommand(ctx, service.CommandRequest{SessionID: info.ID, Owner: "alice", Argv: []string{"sh", "-c", `echo "$PWD $HOME $USER $STAGE"; cat a.txt`}})
	if err != nil || !cres.Success || cres.Stdout != "/home/user /home/user user test\nx" {
		t.Fatalf("command: %+v %v", cres, err)
	}
	cres, err = svc.RunCommand(ctx, service.CommandRequest{SessionID: info.ID, Owner: "alice", Argv: []string{"cat", "/home/user/a.txt"}, WorkingDir: "/home/user"})
	if err != nil || cres.Stdout != "x" {
		t.Fatalf("argv command: %+v %v", cres, err)
	}
	if _, err := svc.RunCommand(ctx, service.CommandRequest{SessionID: info.ID, Owner: "alice", Argv: []string{"ls"}, Command: "ls"}); !errors.Is(err, service.ErrInvalidRequest) {
		t.Fatalf("argv and command: %v", err)
	}
	if _, err := svc.CreateSession(ctx, service.SessionRequest{Owner: "alice", Home: "/etc"}); !errors.Is(err, service.ErrInvalidRequest) {
		t.Fatalf("home over /etc: %v", err)
	}
	if _, err := svc.CreateSession(ctx, service.SessionRequest{Owner: "alice", Env: map[string]string{"LD_PRELOAD": "x"}}); !errors.Is(err, service.ErrInvalidRequest) {
		t.Fatalf("LD_PRELOAD: %v", err)
	}
}

// The file API of a session at /home/user takes its paths there, and
// stat, mkdir, move and a bounded listing work on it.
func TestSessionFileOpsUnderHome(t *testing.T) {
	svc := sessionService(t)
	ctx := context.Background()
	info, err := svc.CreateSession(ctx, service.SessionRequest{Owner: "alice", Home: "/home/user"})
	if err != nil {
		t.Fatal(err)
	}
	id := info.ID
	if _, err := svc.WriteFile(ctx, id, "alice", "/home/user/d/a.txt", []byte("hello")); err != nil {
		t.Fatal(err)
	}
	if b, err := svc.ReadFile(ctx, id, "alice", "d/a.txt"); err != nil || string(b) != "hello" {
		t.Fatalf("read %q %v", b, err)
	}
	for _, outside := range []string{"/etc/passwd", "/home/user/../../etc/passwd", "/home/other/x"} {
		if _, err := svc.ReadFile(ctx, id, "alice", outside); !errors.Is(err, service.ErrBadPath) {
			t.Fatalf("read %s: %v", outside, err)
		}
	}
	if created, err := svc.MakeDir(ctx, id, "alice", "/home/user/e/f"); err != nil || !created {
		t.Fatalf("mkdir %v %v", created, err)
	}
	if created, err := svc.MakeDir(ctx, id, "alice", "/home/user/e/f"); err != nil || created {
		t.Fatalf("mkdir again %v %v", created, err)
	}
	fi, err := svc.MoveFile(ctx, id, "alice", "/home/user/d/a.txt", "/home/user/e/f/b.txt")
	if err != nil || fi.Path != "e/f/b.txt" || fi.Size != 5 || fi.Dir || fi.Mode&0o600 != 0o600 {
		t.Fatalf("move %+v %v", fi, err)
	}
	if _, err := svc.StatFile(ctx, id, "alice", "/home/user/d/a.txt"); !errors.Is(err, service.ErrFileNotFound) {
		t.Fatalf("stat of the old name: %v", err)
	}
	list, err := svc.ListDir(ctx, id, "alice", "/home/user", 1)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, f := range list.Files {
		names = append(names, f.Path)
	}
	if strings.Join(names, " ") != "d e" {
		t.Fatalf("depth 1: %v", names)
	}
	if list, err = svc.ListDir(ctx, id, "alice", "e", 2); err != nil || len(list.Files) != 2 || list.Files[1].Path != "e/f/b.txt" || list.Truncated {
		t.Fatalf("depth 2 below e: %+v %v", list, err)
	}
	// The code sees what the file API did.
	res := inSession(t, svc, id, "alice", "open('/home/user/e/f/b.txt').read()")
	if string(res.Result) != `"hello"` {
		t.Fatalf("code reads %s (%+v)", res.Result, res.Error)
	}
}

// A session with a lifetime ends then, used or not; the lifetime can be
// moved, within SANDBOX_SESSION_MAX_LIFETIME.
func TestSessionLifetime(t *testing.T) {
	svc := sessionService(t, func(c *config.Config) { c.SessionMaxLifetime = time.Hour })
	ctx := context.Background()
	info, err := svc.CreateSession(ctx, service.SessionRequest{Owner: "alice", Lifetime: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := svc.CreateSession(ctx, service.SessionRequest{Owner: "alice", Lifetime: 2 * time.Hour}); !errors.Is(err, service.ErrInvalidRequest) {
		t.Fatalf("a lifetime past the maximum: %v", err)
	}
	// Moved well past what a run takes on a slow or loaded host: the run
	// below must come before the new end.
	end, err := svc.SetSessionLifetime(ctx, info.ID, "alice", 10*time.Second)
	if err != nil || time.Until(end) < 5*time.Second {
		t.Fatalf("moved end %v %v", end, err)
	}
	time.Sleep(500 * time.Millisecond) // past the first lifetime (the time passing is what is tested)
	inSession(t, svc, info.ID, "alice", "1")
	if _, err := svc.SetSessionLifetime(ctx, info.ID, "bob", time.Second); !errors.Is(err, service.ErrSessionNotFound) {
		t.Fatalf("another owner moved it: %v", err)
	}
	if _, err := svc.SetSessionLifetime(ctx, info.ID, "alice", 50*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := svc.GetSession(ctx, info.ID, "alice"); errors.Is(err, service.ErrSessionNotFound) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the session outlived its lifetime")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// A session's commands run beside its interpreter, as processes of one
// machine do, and end when the session closes.
func TestSessionCommandsRunBesideTheInterpreter(t *testing.T) {
	svc := sessionService(t)
	ctx := context.Background()
	id := newSession(t, svc, "alice")
	done := make(chan *service.Result, 1)
	go func() {
		// Waits for a file only a command can make.
		res, _ := svc.Execute(ctx, service.Request{SessionID: id, Owner: "alice", Timeout: 20 * time.Second,
			Code: "import os, time\nopen('started', 'w').close()\nwhile not os.path.exists('go'): time.sleep(0.02)\n'went'"})
		done <- res
	}()
	for {
		if _, err := svc.StatFile(ctx, id, "alice", "started"); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if res, err := svc.RunCommand(ctx, service.CommandRequest{SessionID: id, Owner: "alice", Command: "touch go"}); err != nil || !res.Success {
		t.Fatalf("command beside running code: %+v %v", res, err)
	}
	if res := <-done; res == nil || string(res.Result) != `"went"` {
		t.Fatalf("the code did not see the command's file: %+v", res)
	}

	// A long command ends when its session is closed.
	ended := make(chan *service.CommandResult, 1)
	go func() {
		res, _ := svc.RunCommand(ctx, service.CommandRequest{SessionID: id, Owner: "alice", Timeout: 60 * time.Second,
			Command: "touch looping; while :; do :; done"})
		ended <- res
	}()
	for {
		if _, err := svc.StatFile(ctx, id, "alice", "looping"); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := svc.CloseSession(ctx, id, "alice"); err != nil {
		t.Fatal(err)
	}
	if res := <-ended; res != nil && (res.Success || res.TimedOut) {
		t.Fatalf("the command outlived its session: %+v", res)
	}
	if _, err := svc.RunCommand(ctx, service.CommandRequest{SessionID: id, Owner: "alice", Command: "true"}); !errors.Is(err, service.ErrSessionNotFound) {
		t.Fatalf("a command in a closed session: %v", err)
	}
}
