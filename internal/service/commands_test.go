package service_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/codecage/codecage/internal/service"
)

func runCmd(t *testing.T, svc *service.Service, req service.CommandRequest) *service.CommandResult {
	t.Helper()
	res, err := svc.RunCommand(context.Background(), req)
	if err != nil {
		t.Fatalf("%q: %v", req.Command, err)
	}
	return res
}

func TestRunCommandShell(t *testing.T) {
	svc := newPolicyService(t)
	r := runCmd(t, svc, service.CommandRequest{Command: "echo hello world | tr a-z A-Z; echo two > f.txt; echo one > g.txt; ls *.txt | sort; cat f.txt g.txt | wc -l"})
	if !r.Success || r.Stdout != "HELLO WORLD\nf.txt\ng.txt\n2\n" || r.ExitCode != 0 || r.Error != nil || r.ExecutionID == "" {
		t.Fatalf("%+v", r)
	}
	r = runCmd(t, svc, service.CommandRequest{Command: "grep -c x /nonexistent"})
	if r.Success || r.ExitCode != 2 || !strings.Contains(r.Stderr, "No such file") || r.Error == nil {
		t.Fatalf("failing command: %+v", r)
	}
	r = runCmd(t, svc, service.CommandRequest{Command: `python3 -c 'print(sum(range(10)))' && printf '%s\n' "$GREETING"`, Env: map[string]string{"GREETING": "hi there"}})
	if !r.Success || r.Stdout != "45\nhi there\n" {
		t.Fatalf("python3 and env: %+v", r)
	}
	// Nothing of the host: a generated /etc, and only the allowed programs.
	r = runCmd(t, svc, service.CommandRequest{Command: "cat /etc/shadow; cat ../../etc/passwd | wc -l; ls /usr/bin | wc -l; ls /"})
	if strings.Contains(r.Stdout, "root:$") || !strings.Contains(r.Stderr, "/etc/shadow: No such file") {
		t.Fatalf("host files: %+v", r)
	}
	lines := strings.Split(strings.TrimSpace(r.Stdout), "\n")
	if lines[0] != "3" {
		t.Fatalf("/etc/passwd is not the generated one: %q", r.Stdout)
	}
	for _, l := range lines[2:] {
		if l == "home" || l == "root" || l == "var" || l == "opt" {
			t.Fatalf("host directory %s in the root: %q", l, r.Stdout)
		}
	}
}

// TestRunCommandWhitelist: the kernel, not a parser, keeps other programs
// from running, however they are started.
func TestRunCommandWhitelist(t *testing.T) {
	svc := newPolicyService(t)
	for _, cmd := range []string{
		"perl -e 'print 1'",
		"/usr/bin/perl -e 1",
		"echo x | perl -pe 1",
		"sh -c 'id'",
		"find . -maxdepth 0 -exec id ';'",
		"awk 'BEGIN { system(\"id\") }'",
		`python3 -c "import os; os.execv('/usr/bin/id', ['id'])"`,
		`python3 -c "import subprocess; subprocess.run(['bash', '-c', 'id'], check=True)"`,
		"/usr/lib64/ld-linux-x86-64.so.2 /usr/bin/id",
		"cp /usr/bin/ls /tmp/myls && /tmp/myls",
		"cp /usr/bin/ls ./myls && chmod +x ./myls; ./myls",
		"cp /usr/bin/ls ./myls2 && /usr/lib64/ld-linux-x86-64.so.2 ./myls2 /",
		"cat /usr/bin/python3 > /tmp/py && /usr/lib64/ld-linux-x86-64.so.2 /tmp/py -c 1",
	} {
		// Some programs report a failed child and go on (find -exec,
		// awk's system()); what matters is that nothing else ran.
		r := runCmd(t, svc, service.CommandRequest{Command: cmd})
		if strings.Contains(r.Stdout, "uid=") || strings.Contains(r.Stdout, "bin") || r.Stderr == "" {
			t.Errorf("%q ran: %+v", cmd, r)
		}
	}
	r := runCmd(t, svc, service.CommandRequest{Command: "perl -e 1"})
	if r.Error == nil || !strings.Contains(*r.Error, `program "perl" is not allowed`) {
		t.Fatalf("no clear error: %+v", r)
	}
	// The error quotes the shell's line, which is the sandbox's to write:
	// a 100 kB "program name" is capped.
	r = runCmd(t, svc, service.CommandRequest{Command: `python3 -c "import sys; sys.stderr.write('sh: 1: ' + 'x'*100000 + ': not found\n'); sys.exit(127)"`})
	if r.Error == nil {
		t.Fatalf("no error for exit 127: %+v", r)
	} else if len(*r.Error) > 1024 || !strings.Contains(*r.Error, "(100000 bytes)") {
		t.Fatalf("a long program name in the error: %d bytes: %.300s", len(*r.Error), *r.Error)
	}
	// An operator's list replaces the default.
	cfg := service.LeanTestConfig()
	cfg.AllowedCommands = []string{"echo"}
	small := newServiceWith(t, cfg)
	if r := runCmd(t, small, service.CommandRequest{Command: "echo ok; ls"}); r.Stdout != "ok\n" || r.ExitCode != 127 {
		t.Fatalf("narrow list: %+v", r)
	}
}

func TestRunCommandRequests(t *testing.T) {
	svc := newPolicyService(t)
	for name, req := range map[string]service.CommandRequest{
		"empty":       {Command: "  "},
		"nul":         {Command: "echo a\x00b"},
		"bad utf-8":   {Command: "echo \xff"},
		"LD_PRELOAD":  {Command: "true", Env: map[string]string{"LD_PRELOAD": "/x.so"}},
		"PYTHONPATH":  {Command: "true", Env: map[string]string{"PYTHONPATH": "/x"}},
		"bad name":    {Command: "true", Env: map[string]string{"A B": "x"}},
		"escape dir":  {Command: "pwd", WorkingDir: "../../etc"},
		"abs outside": {Command: "pwd", WorkingDir: "/etc"},
		"timeout":     {Command: "true", Timeout: time.Hour},
	} {
		if _, err := svc.RunCommand(context.Background(), req); !errors.Is(err, service.ErrInvalidRequest) {
			t.Errorf("%s: %v", name, err)
		}
	}
	r := runCmd(t, svc, service.CommandRequest{Command: "pwd", WorkingDir: "nosuch"})
	if r.Success || r.Error == nil || !strings.Contains(*r.Error, "working_dir does not exist") {
		t.Fatalf("missing working dir: %+v", r)
	}
	r = runCmd(t, svc, service.CommandRequest{Command: "while :; do :; done", Timeout: time.Second})
	if r.Success || !r.TimedOut && (r.Limit == nil || *r.Limit != "cpu_time") {
		t.Fatalf("timeout: %+v", r)
	}
	r = runCmd(t, svc, service.CommandRequest{Command: `awk 'BEGIN { while (1) print "0123456789abcdef" }'`})
	if r.Success || !r.Truncated || r.Limit == nil || *r.Limit != "output" {
		t.Fatalf("output limit: limit %v truncated %v", r.Limit, r.Truncated)
	}
	r = runCmd(t, svc, service.CommandRequest{Command: `python3 -c "import socket; socket.create_connection(('1.1.1.1', 53), timeout=2)"`})
	if r.Success || !strings.Contains(r.Stderr, "Error") {
		t.Fatalf("network: %+v", r)
	}
}

// TestRunCommandInSession: commands and the interpreter share the session's
// workspace both ways, and can change each other's files.
func TestRunCommandInSession(t *testing.T) {
	svc := newPolicyService(t)
	ctx := context.Background()
	info, err := svc.CreateSession(ctx, service.SessionRequest{Owner: "o"})
	if err != nil {
		t.Fatal(err)
	}
	res, err := svc.Execute(ctx, service.Request{SessionID: info.ID, Owner: "o", Code: "open('data.txt', 'w').write('from python\\n')"})
	if err != nil || !res.Success {
		t.Fatalf("%v %+v", err, res)
	}
	r := runCmd(t, svc, service.CommandRequest{SessionID: info.ID, Owner: "o", Command: "echo from sh >> data.txt && mkdir -p out && sort data.txt > out/sorted.txt && cat out/sorted.txt"})
	if !r.Success || r.Stdout != "from python\nfrom sh\n" {
		t.Fatalf("%+v", r)
	}
	r = runCmd(t, svc, service.CommandRequest{SessionID: info.ID, Owner: "o", Command: "pwd; ls", WorkingDir: "out"})
	if !r.Success || r.Stdout != "/workspace/out\nsorted.txt\n" {
		t.Fatalf("working dir: %+v", r)
	}
	if _, err := svc.RestartSession(ctx, info.ID, "o"); err != nil {
		t.Fatal(err)
	}
	res, err = svc.Execute(ctx, service.Request{SessionID: info.ID, Owner: "o", Code: "open('out/sorted.txt', 'a').write('again\\n'); open('out/sorted.txt').read()"})
	if err != nil || !res.Success || !strings.Contains(string(res.Result), "again") {
		t.Fatalf("after restart: %v %+v", err, res)
	}
	if _, err := svc.RunCommand(ctx, service.CommandRequest{SessionID: info.ID, Owner: "mallory", Command: "ls"}); !errors.Is(err, service.ErrSessionNotFound) {
		t.Fatalf("another owner: %v", err)
	}
}

// python is python3 when python3 may run (E2B's test_ping_server runs
// python -m http.server), and only then; it adds no program to the root.
func TestRunCommandPythonIsPython3(t *testing.T) {
	svc := newPolicyService(t)
	r := runCmd(t, svc, service.CommandRequest{Command: `python -c 'import sys; print(sys.version_info[0])' && ls -l /usr/bin/python && ls /usr/bin | grep -c '^python$'`})
	if !r.Success || !strings.HasPrefix(r.Stdout, "3\n") || !strings.Contains(r.Stdout, "/usr/bin/python -> python3\n") || !strings.HasSuffix(r.Stdout, "\n1\n") {
		t.Fatalf("python: %+v", r)
	}
	if allowed, _ := svc.CommandsInfo(); !slices.Contains(allowed, "python") {
		t.Fatalf("python not listed as runnable: %v", allowed)
	}
	cfg := service.LeanTestConfig()
	cfg.AllowedCommands = []string{"ls", "cat"}
	r = runCmd(t, newServiceWith(t, cfg), service.CommandRequest{Command: "python -c 1; python3 -c 1"})
	if r.Success || r.ExitCode != 127 || strings.Count(r.Stderr, "not found") != 2 {
		t.Fatalf("python without python3 allowed: %+v", r)
	}
}
