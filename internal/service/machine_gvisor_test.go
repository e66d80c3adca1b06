package service_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/codecage/codecage/internal/config"
	"github.com/codecage/codecage/internal/service"
)

// gvisorMachine is a machine session of owner "o" under gVisor.
func gvisorMachine(t *testing.T) (*service.Service, *service.SessionInfo) {
	t.Helper()
	svc := containerService(t)
	se, err := svc.CreateSession(context.Background(), service.SessionRequest{Owner: "o", Machine: true, UseContainer: true})
	if err != nil {
		t.Fatal(err)
	}
	if se.Backend != "gvisor" {
		t.Fatalf("the machine runs on %q, want gvisor", se.Backend)
	}
	return svc, se
}

// A gVisor machine is one process tree of gVisor's kernel: what a command
// leaves in the background lives on and the next command sees it, any
// program of the root runs, a script in the workspace runs, the code and
// the commands share one /tmp, and none of it is a process of the host's.
func TestGVisorMachineIsOneProcessTree(t *testing.T) {
	svc, se := gvisorMachine(t)
	ctx := context.Background()
	marker := "gvm-" + randomToken(t)[:8]
	nap := fmt.Sprintf("3600.%d", time.Now().UnixNano()%1000000) // this test's alone
	machineCommand(t, svc, se.ID, "nohup sleep "+nap+" >/dev/null 2>&1 &", time.Minute)
	// The background sleep is the machine's process, not the host's.
	ps := machineCommand(t, svc, se.ID, "ps -eo pid,args", time.Minute)
	if !strings.Contains(ps, "sleep "+nap) {
		t.Errorf("ps in the machine does not show the background sleep:\n%s", ps)
	}
	if p := hostProcessNamed("sleep", nap); p != nil {
		t.Errorf("the machine's sleep is a host process: %+v", *p)
	}
	// A background job writes later, after its command has ended.
	machineCommand(t, svc, se.ID, "(sleep 0.5; echo alive > later.txt) &", time.Minute)
	waitFor(t, "the background job's file", func() bool {
		out, err := svc.RunCommand(ctx, service.CommandRequest{SessionID: se.ID, Owner: "o", Command: "cat later.txt", Timeout: time.Minute})
		return err == nil && out.Success && strings.TrimSpace(out.Stdout) == "alive"
	})
	// A script of the workspace runs; any program of the root too.
	machineCommand(t, svc, se.ID, "printf '#!/bin/sh\\necho from-script\\n' > run.sh && chmod +x run.sh", time.Minute)
	if out := machineCommand(t, svc, se.ID, "./run.sh && dirname /a/b && readlink -f .", time.Minute); !strings.Contains(out, "from-script\n/a\n") {
		t.Errorf("script and programs: %q", out)
	}
	// The code sees what the commands wrote in /tmp, and the reverse.
	machineCommand(t, svc, se.ID, "echo shared > /tmp/"+marker, time.Minute)
	res, err := svc.Execute(ctx, service.Request{SessionID: se.ID, Owner: "o", Code: "print(open('/tmp/" + marker + "').read().strip())"})
	if err != nil || !res.Success || strings.TrimSpace(res.Stdout) != "shared" {
		t.Fatalf("the code reads the command's /tmp file: %v %+v", err, res)
	}
	// A new top-level directory: the machine's root takes it.
	if out := machineCommand(t, svc, se.ID, "mkdir -p /workspace/x && echo ok > /workspace/x/f && cat /workspace/x/f", time.Minute); out != "ok\n" {
		t.Errorf("mkdir /workspace: %q", out)
	}
	if _, err := os.Stat("/workspace/x/f"); err == nil {
		t.Errorf("the machine's /workspace/x/f is on the host")
	}
	if err := svc.CloseSession(ctx, se.ID, "o"); err != nil {
		t.Fatal(err)
	}
	assertNoLeftovers(t)
}

// A gVisor machine has root inside, as a native one: its sandbox has a
// user namespace of its own mapping the machine's block of ids, so root
// of gVisor's kernel is the block's first id to the host. Root runs
// commands, sudo works for the user, useradd and a writable /usr/local
// work (in the sandbox's memory), and all of it survives a park and a
// fork. Judged from the host: the file root wrote in the workspace is the
// block's first id's, the host's /usr gains nothing, and every host
// process of the sandbox runs as an id of the block, in a user namespace
// that is not the host's.
func TestGVisorMachineHasRootInside(t *testing.T) {
	var stateDir string
	svc := containerService(t, func(c *config.Config) { stateDir = c.StateDir })
	ctx := context.Background()
	se, err := svc.CreateSession(ctx, service.SessionRequest{Owner: "o", Machine: true, UseContainer: true})
	if err != nil || se.Backend != "gvisor" {
		t.Fatalf("a gVisor machine: %v %+v", err, se)
	}
	ws := machineWorkspace(t, svc, stateDir, se.ID)
	first := workspaceUIDOf(t, ws) - 1000
	tool := "cage-tool-" + randomToken(t)[:8]
	res := rootCommand(t, svc, se.ID, "id -u && useradd -m alice && id -u alice && mkdir -p /usr/local/bin && "+
		"printf '#!/bin/sh\\necho tool-ran\\n' > /usr/local/bin/"+tool+" && chmod 755 /usr/local/bin/"+tool+
		" && echo r > "+se.Home+"/rootfile && echo done")
	if res.Stdout != "0\n1001\ndone\n" {
		t.Fatalf("root inside: %q %q", res.Stdout, res.Stderr)
	}
	check := func(id, when string) {
		t.Helper()
		out := machineCommand(t, svc, id, "id -u; sudo id -u; echo in | sudo cat; "+tool+"; stat -c %u rootfile; id -u alice", time.Minute)
		if out != "1000\n0\nin\ntool-ran\n0\n1001\n" {
			t.Errorf("%s: %q", when, out)
		}
	}
	check(se.ID, "the user, sudo and root's changes")
	if fi, err := os.Stat(filepath.Join(ws, "rootfile")); err != nil || fi.Sys().(*syscall.Stat_t).Uid != uint32(first) {
		t.Errorf("root inside's file on the host: %v, want owner %d (the block's first id)", err, first)
	}
	if _, err := os.Lstat("/usr/local/bin/" + tool); !os.IsNotExist(err) {
		t.Errorf("the host's /usr/local/bin has the machine's tool: %v", err)
	}
	checkBlockProcesses(t, first)

	if _, err := svc.PauseSession(ctx, se.ID, "o", service.PauseMode{KeepMemory: true, Park: true}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := svc.ResumeSession(ctx, se.ID, "o"); err != nil {
		t.Fatal(err)
	}
	check(se.ID, "after a park")
	forks, err := svc.ForkSession(ctx, se.ID, "o", 1, 0)
	if err != nil || len(forks) != 1 || forks[0].Session == nil {
		t.Fatalf("fork: %v %+v", err, forks)
	}
	check(forks[0].Session.ID, "a fork")
	if err := svc.CloseSession(ctx, se.ID, "o"); err != nil {
		t.Fatal(err)
	}
}

// checkBlockProcesses judges a gVisor machine with root inside from the
// host: its Sentry and gofer run as ids of its block (first on), each in
// a user namespace that is not the host's, never as the host's root.
func checkBlockProcesses(t *testing.T, first int) {
	t.Helper()
	hostNS, _ := os.Readlink("/proc/self/ns/user")
	pids := blockPIDs(first)
	if len(pids) == 0 {
		t.Fatalf("no host process runs as the machine's block (from %d)", first)
	}
	for _, pid := range pids {
		if ns, _ := os.Readlink("/proc/" + strconv.Itoa(pid) + "/ns/user"); ns == "" || ns == hostNS {
			t.Errorf("process %d of the machine is in the host's user namespace", pid)
		}
	}
}

// A gVisor machine's command gets its input, its terminal, its exit
// status and signal, and its time limit, which ends what it started in
// its process group (judged inside: the host has no such process).
func TestGVisorMachineCommandIO(t *testing.T) {
	svc, se := gvisorMachine(t)
	ctx := context.Background()
	res, err := svc.RunCommand(ctx, service.CommandRequest{SessionID: se.ID, Owner: "o", Command: "tr a-z A-Z", Input: "fed\n"})
	if err != nil || res.Stdout != "FED\n" {
		t.Fatalf("stdin: %v %+v", err, res)
	}
	onTerm, err := svc.RunCommand(ctx, service.CommandRequest{SessionID: se.ID, Owner: "o", Command: "test -t 0 && test -t 1 && echo isatty; stty size",
		Terminal: &service.TerminalSize{Cols: 91, Rows: 23}})
	if err != nil || !strings.Contains(onTerm.Stdout, "isatty") || !strings.Contains(onTerm.Stdout, "23 91") {
		t.Fatalf("on a terminal: %v %+v", err, onTerm)
	}
	res, err = svc.RunCommand(ctx, service.CommandRequest{SessionID: se.ID, Owner: "o", Command: "echo out; echo err >&2; exit 7"})
	if err != nil || res.ExitCode != 7 || res.Stdout != "out\n" || res.Stderr != "err\n" {
		t.Fatalf("exit status and streams: %v %+v", err, res)
	}
	start := time.Now()
	res, err = svc.RunCommand(ctx, service.CommandRequest{SessionID: se.ID, Owner: "o", Command: "sleep 4141 & sleep 4242", Timeout: time.Second})
	if err != nil || !res.TimedOut {
		t.Fatalf("a command past its time limit: %v %+v", err, res)
	}
	if d := time.Since(start); d > 30*time.Second {
		t.Errorf("the 1 s command took %v", d)
	}
	// What a command leaves running may write to the command's output
	// after its end: it is read and dropped, never a closed pipe.
	machineCommand(t, svc, se.ID, "(n=0; while :; do echo tick; n=$((n+1)); echo $n > /tmp/ticks; sleep 0.05; done) &", time.Minute)
	tick := func() int {
		n, _ := strconv.Atoi(strings.TrimSpace(machineCommand(t, svc, se.ID, "cat /tmp/ticks", time.Minute)))
		return n
	}
	first := tick()
	waitFor(t, "the background writer to tick on after its command", func() bool { return tick() > first+5 })
	left := machineCommand(t, svc, se.ID, "for i in $(seq 200); do pgrep -f 'sleep 4[12]4[12]' >/dev/null || break; sleep 0.05; done; pgrep -fa 'sleep 4[12]4[12]' || echo none", time.Minute)
	if left != "none\n" {
		t.Errorf("the timed-out command's processes live on: %q", left)
	}
}

// A parked gVisor machine comes back with its root's writes (its own
// root, kept beside its memory image). What its commands left running does not come
// back (as natively): those processes hold descriptors of the host's,
// which no memory image carries.
func TestGVisorMachineParkKeepsItsRoot(t *testing.T) {
	svc, se := gvisorMachine(t)
	ctx := context.Background()
	machineCommand(t, svc, se.ID, "mkdir -p /app && echo kept > /app/state", time.Minute)
	if _, err := svc.PauseSession(ctx, se.ID, "o", service.PauseMode{KeepMemory: true, Park: true}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := svc.ResumeSession(ctx, se.ID, "o"); err != nil {
		t.Fatal(err)
	}
	if out := machineCommand(t, svc, se.ID, "cat /app/state", time.Minute); out != "kept\n" {
		t.Fatalf("after a park: %q", out)
	}
}

// A fork of a gVisor machine starts from its memory image: the copy has
// the machine's root writes, and what the copy writes at / stays its own.
func TestGVisorMachineForkCopiesItsRoot(t *testing.T) {
	svc, se := gvisorMachine(t)
	ctx := context.Background()
	machineCommand(t, svc, se.ID, "mkdir -p /app && echo original > /app/state", time.Minute)
	forks, err := svc.ForkSession(ctx, se.ID, "o", 1, 0)
	if err != nil || len(forks) != 1 || forks[0].Session == nil {
		t.Fatalf("fork: %v %+v", err, forks)
	}
	copyID := forks[0].Session.ID
	if out := machineCommand(t, svc, copyID, "cat /app/state; echo copy > /app/state", time.Minute); out != "original\n" {
		t.Fatalf("the fork: %q", out)
	}
	if out := machineCommand(t, svc, se.ID, "cat /app/state", time.Minute); out != "original\n" {
		t.Fatalf("the original after its fork wrote: %q", out)
	}
}

// A gVisor machine's whole tree is on the host, as a native machine's:
// the file API and its commands see one /tmp, one /app, one /etc and
// /usr (root's changes, read live), it lies in the session's root
// directory on the host (judged there, with owners), the host's /usr
// never changes, and a park brings all of it back (from the session's
// root, not the memory image), as an interpreter's restart does.
func TestGVisorMachineFilesReachItsWholeRoot(t *testing.T) {
	secret := plantHostSecret(t)
	var stateDir string
	svc := containerService(t, func(c *config.Config) { stateDir = c.StateDir })
	ctx := context.Background()
	se, err := svc.CreateSession(ctx, service.SessionRequest{Owner: "o", Machine: true, UseContainer: true})
	if err != nil || se.Backend != "gvisor" {
		t.Fatalf("a gVisor machine: %v %+v", err, se)
	}
	filesSeeRootsChanges(t, svc, se, secret)

	if _, err := svc.WriteFile(ctx, se.ID, "o", "/app/main.txt", []byte("from the API\n")); err != nil {
		t.Fatalf("write /app/main.txt: %v", err)
	}
	if _, err := svc.WriteFile(ctx, se.ID, "o", "/tmp/data/hello.py", []byte("print('hi from /tmp')\n")); err != nil {
		t.Fatalf("write /tmp/data/hello.py: %v", err)
	}
	out := machineCommand(t, svc, se.ID, "cat /app/main.txt && python3 /tmp/data/hello.py && mkdir -p /srv/data && echo made > /srv/data/w && echo t > /tmp/t", time.Minute)
	if out != "from the API\nhi from /tmp\n" {
		t.Fatalf("the command saw: %q", out)
	}
	for p, want := range map[string]string{"/srv/data/w": "made\n", "/tmp/t": "t\n"} {
		if b, err := svc.ReadFile(ctx, se.ID, "o", p); err != nil || string(b) != want {
			t.Errorf("the file API reads %s: %q %v", p, b, err)
		}
	}
	// What the file API writes while the machine runs shows at once, in
	// a directory its kernel has listed already.
	if out := machineCommand(t, svc, se.ID, "ls /app; stat -c %a /tmp", time.Minute); out != "main.txt\n1777\n" {
		t.Errorf("/app and /tmp's mode: %q", out)
	}
	if _, err := svc.WriteFile(ctx, se.ID, "o", "/app/second.txt", []byte("2\n")); err != nil {
		t.Fatal(err)
	}
	if out := machineCommand(t, svc, se.ID, "ls /app; cat /app/second.txt", time.Minute); out != "main.txt\nsecond.txt\n2\n" {
		t.Errorf("a file the API wrote after the machine listed /app: %q", out)
	}
	// Judged on the host: in the session's root directory, the user's.
	roots, _ := filepath.Glob(filepath.Join(stateDir, "sessions", se.ID+".root"))
	if len(roots) != 1 {
		t.Fatalf("the machine's root on the host: %v", roots)
	}
	user := workspaceUIDOf(t, machineWorkspace(t, svc, stateDir, se.ID))
	for _, rel := range []string{"app/main.txt", "srv/data/w", "tmp/t", "tmp/data/hello.py"} {
		fi, err := os.Lstat(filepath.Join(roots[0], rel))
		if err != nil || fi.Sys().(*syscall.Stat_t).Uid != uint32(user) {
			t.Errorf("%s on the host: %v, want the user's (%d)", rel, err, user)
		}
	}
	if _, err := os.Lstat("/app/main.txt"); !os.IsNotExist(err) {
		t.Errorf("the host has /app/main.txt: %v", err)
	}

	if _, err := svc.PauseSession(ctx, se.ID, "o", service.PauseMode{KeepMemory: true, Park: true}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := svc.ResumeSession(ctx, se.ID, "o"); err != nil {
		t.Fatal(err)
	}
	if out := machineCommand(t, svc, se.ID, "cat /app/main.txt /tmp/t /usr/local/bin/cage-tool; grep -c cage-db /etc/hosts", time.Minute); out != "from the API\nt\nmine\n1\n" {
		t.Errorf("after a park: %q", out)
	}
	if b, err := svc.ReadFile(ctx, se.ID, "o", "/usr/local/bin/cage-tool"); err != nil || string(b) != "mine\n" {
		t.Errorf("root's tool through the file API after a park: %q %v", b, err)
	}
}
