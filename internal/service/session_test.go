package service_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/codecage/codecage/internal/config"
	"github.com/codecage/codecage/internal/policy"
	"github.com/codecage/codecage/internal/pool"
	"github.com/codecage/codecage/internal/service"
)

func sessionService(t *testing.T, mutate ...func(*config.Config)) *service.Service {
	t.Helper()
	cfg := service.LeanTestConfig()
	cfg.EnableFilesystem = true
	cfg.StateDir = t.TempDir()
	cfg.PoolSize = 0
	for _, m := range mutate {
		m(&cfg)
	}
	return newServiceWith(t, cfg)
}

func newSession(t *testing.T, svc *service.Service, owner string, profiles ...string) string {
	t.Helper()
	info, err := svc.CreateSession(context.Background(), service.SessionRequest{Owner: owner, Profiles: profiles})
	if err != nil {
		t.Fatalf("CreateSession: %v", err)
	}
	return info.ID
}

func inSession(t *testing.T, svc *service.Service, id, owner, code string) *service.Result {
	t.Helper()
	res, err := svc.Execute(context.Background(), service.Request{SessionID: id, Owner: owner, Code: code, Timeout: 10 * time.Second})
	if err != nil {
		t.Fatalf("Execute in session: %v", err)
	}
	return res
}

func TestSessionStatePersists(t *testing.T) {
	svc := sessionService(t)
	id := newSession(t, svc, "alice")
	res := inSession(t, svc, id, "alice", "import math\nx = 41\ndef inc(v): return v + 1\nprint('cell 1')")
	if !res.Success || res.Stdout != "cell 1\n" {
		t.Fatalf("cell 1: %+v", res)
	}
	res = inSession(t, svc, id, "alice", "y = inc(x)\nprint('cell 2')\ny")
	if !res.Success || res.Stdout != "cell 2\n" || string(res.Result) != "42" {
		t.Fatalf("cell 2: stdout %q result %s error %+v", res.Stdout, res.Result, res.Error)
	}
	// A failing cell does not kill the session.
	res = inSession(t, svc, id, "alice", "1/0")
	if res.Error == nil || res.Error.Type != "ZeroDivisionError" {
		t.Fatalf("cell 3: %+v", res.Error)
	}
	res = inSession(t, svc, id, "alice", "math.floor(y / 2)")
	if !res.Success || string(res.Result) != "21" || strings.Join(res.Variables, ",") != "x,inc,y" {
		t.Fatalf("cell 4: %s %v %+v", res.Result, res.Variables, res.Error)
	}
	list := svc.ListSessions(context.Background(), "alice")
	if len(list) != 1 || list[0].ID != id || list[0].Runs != 4 {
		t.Fatalf("list %+v", list)
	}
	if err := svc.CloseSession(context.Background(), id, "alice"); err != nil {
		t.Fatal(err)
	}
	if _, err := svc.Execute(context.Background(), service.Request{SessionID: id, Owner: "alice", Code: "1"}); !errors.Is(err, service.ErrSessionNotFound) {
		t.Fatalf("closed session: %v", err)
	}
	assertNoLeftovers(t)
}

func TestSessionsDoNotLeak(t *testing.T) {
	svc := sessionService(t, func(c *config.Config) { c.PoolSize = 2 })
	a := newSession(t, svc, "alice", "filesystem")
	b := newSession(t, svc, "bob", "filesystem")
	inSession(t, svc, a, "alice", "secret = 'alice-only'\nopen('/workspace/a.txt', 'w').write(secret)\nopen('/tmp/t', 'w').write('x')")
	res := inSession(t, svc, b, "bob", "import os\n[ 'secret' in globals(), os.listdir('/workspace'), os.listdir('/tmp')]")
	if string(res.Result) != "[false,[],[]]" {
		t.Fatalf("bob sees alice's state: %s %+v", res.Result, res.Error)
	}
	// Stateless runs see nothing of either.
	res = execute(t, svc, service.Request{Profiles: []string{"filesystem"}, Code: "import os\n[os.listdir('/workspace'), 'secret' in globals()]"})
	if string(res.Result) != "[[],false]" {
		t.Fatalf("stateless run sees session state: %s", res.Result)
	}
	// Sessions are per owner.
	if _, err := svc.Execute(context.Background(), service.Request{SessionID: a, Owner: "bob", Code: "secret"}); !errors.Is(err, service.ErrSessionNotFound) {
		t.Fatalf("bob used alice's session: %v", err)
	}
	if _, err := svc.ReadFile(context.Background(), a, "bob", "a.txt"); !errors.Is(err, service.ErrSessionNotFound) {
		t.Fatalf("bob read alice's file: %v", err)
	}
	if got := svc.ListSessions(context.Background(), "bob"); len(got) != 1 || got[0].ID != b {
		t.Fatalf("bob's list %+v", got)
	}
}

func TestSessionTimeoutEndsItAndRestartKeepsFiles(t *testing.T) {
	svc := sessionService(t)
	id := newSession(t, svc, "")
	inSession(t, svc, id, "", "open('/workspace/keep.txt', 'w').write('kept')\nx = 1")
	res, err := svc.Execute(context.Background(), service.Request{SessionID: id, Code: "while True: pass", Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	// The words of every surface, not one surface's tool (E2B has no restart_session).
	if !res.TimedOut || !strings.Contains(res.Error.Message, "has ended: restart it") || strings.Contains(res.Error.Message, "restart_session") {
		t.Fatalf("timeout: %+v", res.Error)
	}
	_, err = svc.Execute(context.Background(), service.Request{SessionID: id, Code: "x"})
	if !errors.Is(err, service.ErrSessionEnded) || !strings.Contains(err.Error(), "restart") {
		t.Fatalf("next call must say the session ended: %v", err)
	}
	if _, err := svc.RestartSession(context.Background(), id, ""); err != nil {
		t.Fatal(err)
	}
	res = inSession(t, svc, id, "", "open('/workspace/keep.txt').read(), 'x' in globals()")
	if string(res.Result) != `["kept",false]` {
		t.Fatalf("after restart: %s %+v", res.Result, res.Error)
	}
}

func TestSessionOutputCapIsPerRequest(t *testing.T) {
	svc := sessionService(t, func(c *config.Config) { c.OutputSize = 1000 })
	id := newSession(t, svc, "")
	for i := 0; i < 5; i++ { // 5 x 600 bytes: over the cap in total, never in one request
		res := inSession(t, svc, id, "", "print('x' * 600)")
		if !res.Success || len(res.Stdout) != 601 {
			t.Fatalf("request %d: %d bytes, %+v", i, len(res.Stdout), res.Error)
		}
	}
}

func TestFileAPI(t *testing.T) {
	svc := sessionService(t, func(c *config.Config) { c.WorkspaceMax = 1 << 20; c.MaxFileSize = 256 << 10 })
	id := newSession(t, svc, "o", "filesystem")
	if _, err := svc.WriteFile(context.Background(), id, "o", "data/in.csv", []byte("a,b\n1,2\n")); err != nil {
		t.Fatal(err)
	}
	res := inSession(t, svc, id, "o", "import csv\nrows = list(csv.reader(open('data/in.csv')))\nopen('/workspace/out.txt', 'w').write(str(len(rows)))\nrows[1]")
	if string(res.Result) != `["1","2"]` {
		t.Fatalf("code reading the written file: %s %+v", res.Result, res.Error)
	}
	got, err := svc.ReadFile(context.Background(), id, "o", "/workspace/out.txt")
	if err != nil || string(got) != "2" {
		t.Fatalf("read back: %q %v", got, err)
	}
	// The code can change a file the API wrote (it belongs to the sandbox).
	res = inSession(t, svc, id, "o", "open('data/in.csv', 'a').write('3,4\\n')")
	if !res.Success {
		t.Fatalf("code appending to an API file: %+v", res.Error)
	}
	list, err := svc.ListFiles(context.Background(), id, "o", "")
	if err != nil || len(list.Files) != 3 || list.Truncated {
		t.Fatalf("list %+v %v", list, err)
	}
	if err := svc.DeleteFile(context.Background(), id, "o", "data"); err != nil {
		t.Fatal(err)
	}
	if _, err := svc.ReadFile(context.Background(), id, "o", "data/in.csv"); !errors.Is(err, service.ErrFileNotFound) {
		t.Fatalf("deleted file: %v", err)
	}
	// Bad paths.
	for _, p := range []string{"../x", "/etc/passwd", "a/../../b", "/workspace/../etc/passwd", "", "a\x00b", "/workspacex/y"} {
		if _, err := svc.ReadFile(context.Background(), id, "o", p); !errors.Is(err, service.ErrBadPath) {
			t.Errorf("ReadFile(%q): %v, want ErrBadPath", p, err)
		}
		if _, err := svc.WriteFile(context.Background(), id, "o", p, []byte("x")); !errors.Is(err, service.ErrBadPath) {
			t.Errorf("WriteFile(%q): %v, want ErrBadPath", p, err)
		}
	}
	// Size caps: per file and per workspace.
	if _, err := svc.WriteFile(context.Background(), id, "o", "big", bytes.Repeat([]byte("x"), 300<<10)); !errors.Is(err, service.ErrTooLarge) {
		t.Fatalf("file over the cap: %v", err)
	}
	for i := 0; i < 4; i++ {
		if _, err := svc.WriteFile(context.Background(), id, "o", "f"+string(rune('a'+i)), bytes.Repeat([]byte("x"), 250<<10)); err != nil {
			t.Fatalf("file %d: %v", i, err)
		}
	}
	if _, err := svc.WriteFile(context.Background(), id, "o", "one-too-many", bytes.Repeat([]byte("x"), 250<<10)); !errors.Is(err, service.ErrTooLarge) {
		t.Fatalf("workspace over its cap: %v", err)
	}
}

// ATTACKS.md row 12: a symlink in the workspace pointing at a host path,
// read through the file API: refused, or the in-sandbox target, never host
// content.
func TestContainment_12_SymlinkThroughFileAPI(t *testing.T) {
	svc := sessionService(t)
	id := newSession(t, svc, "", "filesystem")
	token := "codecage-canary-" + randomToken(t)
	canary := filepath.Join(t.TempDir(), "canary")
	if err := os.WriteFile(canary, []byte(token), 0o644); err != nil {
		t.Fatal(err)
	}
	res := inSession(t, svc, id, "", `import os
os.symlink("`+canary+`", "/workspace/abs")
os.symlink("/etc/passwd", "/workspace/passwd")
os.symlink("../../../../../../`+strings.TrimPrefix(canary, "/")+`", "/workspace/rel")
os.mkdir("/workspace/d")
os.symlink("/", "/workspace/d/root")
os.mkfifo("/workspace/fifo")
os.symlink("inside.txt", "/workspace/ok")
open("/workspace/inside.txt", "w").write("in-sandbox")`)
	if !res.Success {
		t.Fatalf("setup: %+v", res.Error)
	}
	var throughRoot error // the write through d/root into the sandbox's /tmp
	for _, p := range []string{"abs", "passwd", "rel", "d/root/etc/passwd", "d/root" + canary} {
		got, err := svc.ReadFile(context.Background(), id, "", p)
		if err == nil || strings.Contains(string(got), token) || strings.Contains(string(got), "root:") {
			t.Errorf("ReadFile(%q) = %q, %v: host content through a symlink", p, got, err)
		}
		_, err = svc.WriteFile(context.Background(), id, "", p, []byte("overwrite"))
		if p == "d/root"+canary {
			throughRoot = err
		} else if err == nil {
			t.Errorf("WriteFile(%q) followed a symlink out", p)
		}
	}
	if b, _ := os.ReadFile(canary); string(b) != token {
		t.Fatalf("the host canary changed: %q", b)
	}
	// d/root leads to the sandbox's "/": natively, a write through it
	// lands in the session's own /tmp (mkdir -p through a link, as envd
	// does), which the sandbox's code sees, never on the host (the canary
	// above). A gVisor session's /tmp is inside its sandbox, out of the
	// file API's reach: refused.
	switch {
	case onGVisor():
		if !errors.Is(throughRoot, service.ErrBadPath) {
			t.Fatalf("a write into a gVisor session's /tmp through d/root: %v, want a bad path", throughRoot)
		}
	case throughRoot != nil:
		t.Fatalf("the write through d/root into the session's /tmp: %v", throughRoot)
	default:
		if res := inSession(t, svc, id, "", `open("`+canary+`").read()`); !res.Success || !strings.Contains(string(res.Result), "overwrite") {
			t.Fatalf("the write through d/root did not land in the sandbox's /tmp: %+v", res)
		}
	}
	// A FIFO must not hang the server.
	done := make(chan error, 1)
	go func() {
		_, err := svc.ReadFile(context.Background(), id, "", "fifo")
		done <- err
	}()
	select {
	case err := <-done:
		if err == nil {
			t.Error("reading a FIFO succeeded")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("ReadFile hung on a FIFO")
	}
	// A link that stays inside is the in-sandbox target.
	if got, err := svc.ReadFile(context.Background(), id, "", "ok"); err != nil || string(got) != "in-sandbox" {
		t.Fatalf("inside link: %q %v", got, err)
	}
}

func TestSessionLimitsAndReaping(t *testing.T) {
	// The cap, on a service whose sessions never go idle during the test: a
	// gVisor session takes longer to start than a short TTL.
	capped := sessionService(t, func(c *config.Config) {
		c.MaxSessions = 2
		c.SessionIdleTTL = time.Hour
	})
	newSession(t, capped, "")
	newSession(t, capped, "")
	if _, err := capped.CreateSession(context.Background(), service.SessionRequest{}); !errors.Is(err, service.ErrTooManySessions) {
		t.Fatalf("third session: %v", err)
	}
	// A bad request is reported as such, even when no slot is free.
	if _, err := capped.CreateSession(context.Background(), service.SessionRequest{Profiles: []string{"network"}}); !errors.Is(err, service.ErrInvalidRequest) {
		t.Fatalf("a session with a disabled profile: %v", err)
	}

	// Reaping frees the slots.
	svc := sessionService(t, func(c *config.Config) {
		c.MaxSessions = 2
		c.SessionIdleTTL = 300 * time.Millisecond
	})
	newSession(t, svc, "")
	newSession(t, svc, "")
	deadline := time.Now().Add(10 * time.Second)
	for len(svc.ListSessions(context.Background(), "")) > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("idle sessions were not reaped: %+v", svc.ListSessions(context.Background(), ""))
		}
		time.Sleep(50 * time.Millisecond)
	}
	newSession(t, svc, "") // the slots are free again
	newSession(t, svc, "")
}

func TestClosingASessionEndsARunningRequest(t *testing.T) {
	svc := sessionService(t)
	id := newSession(t, svc, "")
	done := make(chan *service.Result, 1)
	running := make(chan struct{})
	go func() {
		res, _ := svc.Execute(context.Background(), service.Request{SessionID: id, Code: "import time\nprint('up', flush=True)\ntime.sleep(60)", Timeout: 120 * time.Second,
			OnOutput: func(_, line string) {
				if strings.HasPrefix(line, "up") {
					close(running)
				}
			}})
		done <- res
	}()
	// Closed once the request runs (its line has come).
	select {
	case <-running:
	case res := <-done:
		t.Fatalf("the request ended before it ran: %+v", res)
	case <-time.After(60 * time.Second):
		t.Fatal("the request did not start within 60 s")
	}
	start := time.Now()
	if err := svc.CloseSession(context.Background(), id, ""); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Fatalf("close waited %v for the request", d)
	}
	if res := <-done; res == nil || res.Success {
		t.Fatalf("the request survived its session: %+v", res)
	}
	assertNoLeftovers(t)
}

// TestSessionSpares: a default session comes from a spare started ahead,
// which is fresh (nothing of an earlier session), is replaced after use,
// and is not handed out once it has died waiting.
func TestSessionSpares(t *testing.T) {
	allImports := func(c *config.Config) {
		c.AllowedImports = []string{policy.AllImports}
		c.SessionPoolSize, c.GVisorSessionPoolSize = 1, 1 // the spares under test
	}
	svc := sessionService(t, allImports)
	class := "session/" + testBackend(t)
	waitSpare := func(svc *service.Service) pool.Stats {
		t.Helper()
		deadline := time.Now().Add(60 * time.Second)
		for {
			st := svc.PoolStats()[class]
			if st.Ready == 1 {
				return st
			}
			if time.Now().After(deadline) {
				t.Fatalf("no spare session ready: %+v", svc.PoolStats())
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	before := waitSpare(svc)
	a := newSession(t, svc, "alice")
	if st := svc.PoolStats()[class]; st.Hits != before.Hits+1 {
		t.Fatalf("the session did not come from the spare: %+v then %+v", before, st)
	}
	if res := inSession(t, svc, a, "alice", "secret = 'a'\nopen('a.txt', 'w').write('a')\nimport os\nos.getuid()"); !res.Success {
		t.Fatalf("cell: %+v", res.Error)
	}
	before = waitSpare(svc) // replaced
	b := newSession(t, svc, "bob")
	if st := svc.PoolStats()[class]; st.Hits != before.Hits+1 {
		t.Fatalf("the second session did not come from a spare: %+v then %+v", before, st)
	}
	res := inSession(t, svc, b, "bob", "import os\n['secret' in globals(), os.listdir('.')]")
	if !res.Success || string(res.Result) != "[false,[]]" {
		t.Fatalf("a spare carried something: %s %+v", res.Result, res.Error)
	}
	// A request that spells the default (every enabled profile) out fits
	// a spare too.
	before = waitSpare(svc)
	if _, err := svc.CreateSession(context.Background(), service.SessionRequest{Profiles: []string{"filesystem", "basic"}}); err != nil {
		t.Fatal(err)
	}
	if st := svc.PoolStats()[class]; st.Hits != before.Hits+1 {
		t.Fatalf("profiles [filesystem basic] did not take the spare: %+v then %+v", before, st)
	}
	// Another shape starts a sandbox of its own, and counts no miss.
	if _, err := svc.CreateSession(context.Background(), service.SessionRequest{MemoryBytes: 200 << 20}); err != nil {
		t.Fatal(err)
	}
	if st := svc.PoolStats()[class]; st.Misses != before.Misses {
		t.Fatalf("a non-default session counted as a miss: %+v", st)
	}

	// A spare that died waiting (here: its lifetime ran out) is not given
	// out; the session starts a sandbox of its own.
	// The lifetime also bounds the session made next: long enough for its
	// run on a slow or loaded host.
	short := sessionService(t, allImports, func(c *config.Config) { c.SessionMaxLifetime = 3 * time.Second })
	waitSpare(short)
	ready := time.Now()
	// The spare is dead once a sandbox process there now is gone, seen from
	// the host (nothing else ends one here). gVisor's run as no sandbox
	// uid: there, the lifetime's passing (the behaviour under test) is
	// waited for, with a second to spare.
	was := sandboxProcesses(t)
	if onGVisor() {
		time.Sleep(time.Until(ready.Add(4 * time.Second)))
	}
	for deadline := time.Now().Add(30 * time.Second); !onGVisor(); time.Sleep(50 * time.Millisecond) {
		now := sandboxProcesses(t)
		if slices.ContainsFunc(was, func(p string) bool { return !slices.Contains(now, p) }) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no sandbox process ended 30 s after a spare with a 3 s lifetime was ready: %v", now)
		}
	}
	id := newSession(t, short, "")
	if res := inSession(t, short, id, "", "6 * 7"); !res.Success || string(res.Result) != "42" {
		t.Fatalf("after a dead spare: %s %+v", res.Result, res.Error)
	}
}
