package service_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/codecage/codecage/internal/config"
	"github.com/codecage/codecage/internal/leftovers"
	"github.com/codecage/codecage/internal/service"
)

// blockProcesses are the host's processes running as any id of the block
// [first, first+1024).
func blockProcesses(first int) []leftovers.Process {
	var out []leftovers.Process
	for _, p := range leftovers.HostProcesses() {
		if uid := p.UID(); uid >= first && uid < first+1024 {
			out = append(out, p)
		}
	}
	return out
}

// A machine session's commands run as its user by default and as root
// inside when asked: root owns what it makes and gives files to the
// machine's other ids, which the host sees as the ids of the machine's
// own block; nothing of the block runs once the session is closed.
// Elsewhere root is refused, and so is a user the sandbox does not have.
func TestMachineCommandsAsRoot(t *testing.T) {
	svc, cfg, se := nativeMachine(t, nil)
	ctx := context.Background()
	if out := machineCommand(t, svc, se.ID, "id -u; id -g; whoami", 0); !strings.HasPrefix(out, "1000\n1000\n") {
		t.Fatalf("the default user: %q", out)
	}
	res, err := svc.RunCommand(ctx, service.CommandRequest{SessionID: se.ID, Owner: "o", User: "root",
		Command: "id -u; pwd; echo $HOME; whoami; mkdir -p /srv/made/by && chown -R 1000:1000 /srv/made && stat -c %u /srv/made/by; touch /root/kept; " +
			"cd " + se.Home + " && echo x > given && chown 1001:1002 given && stat -c %u:%g given; chown 5000 given 2>/dev/null; echo unmapped $?"})
	if err != nil || !res.Success {
		t.Fatalf("as root: %v %+v", err, res)
	}
	if want := "0\n/root\n/root\nroot\n1000\n1001:1002\nunmapped 1\n"; res.Stdout != want {
		t.Fatalf("as root: stdout %q, want %q (stderr %q)", res.Stdout, want, res.Stderr)
	}
	// Judged from the host: the file is the block's, the workspace its user's.
	found, _ := filepath.Glob(filepath.Join(cfg.StateDir, "sessions", se.ID, "given"))
	if len(found) != 1 {
		t.Fatalf("the host's copy of given: %v", found)
	}
	var ws, given syscall.Stat_t
	if err := syscall.Stat(filepath.Dir(found[0]), &ws); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Stat(found[0], &given); err != nil {
		t.Fatal(err)
	}
	first := int(ws.Uid) - 1000
	if first < 1_000_000 || int(given.Uid) != first+1001 || int(given.Gid) != first+1002 {
		t.Fatalf("on the host: workspace %d, given %d:%d (want %d:%d)", ws.Uid, given.Uid, given.Gid, first+1001, first+1002)
	}
	// sudo, from the user's command: root inside too, on the command's
	// own output and exit status.
	if out := machineCommand(t, svc, se.ID, "sudo id -u && sudo sh -c 'echo $HOME; whoami' && echo piped | sudo tee /srv/made/sudo.txt >/dev/null && stat -c %U /srv/made/sudo.txt", 0); out != "0\n/root\nroot\nroot\n" {
		t.Fatalf("sudo: %q", out)
	}
	// /usr/local is root's to write, and everyone's to run.
	machineCommand(t, svc, se.ID, `sudo sh -c 'printf "#!/bin/sh\necho hello from usr-local\n" > /usr/local/bin/cage-hello && chmod 755 /usr/local/bin/cage-hello'`, 0)
	if out := machineCommand(t, svc, se.ID, "cage-hello; touch /usr/local/bin/mine 2>/dev/null || echo refused", 0); out != "hello from usr-local\nrefused\n" {
		t.Fatalf("/usr/local: %q", out)
	}
	if _, err := os.Stat("/usr/local/bin/cage-hello"); !os.IsNotExist(err) {
		t.Fatalf("the host's /usr/local/bin has the machine's file: %v", err)
	}
	if res, err := svc.RunCommand(ctx, service.CommandRequest{SessionID: se.ID, Owner: "o", Command: "sudo sh -c 'exit 3'"}); err != nil || res.ExitCode != 3 {
		t.Fatalf("sudo's exit status: %v %+v", err, res)
	}
	// The user cannot take root's file back: root inside is someone else.
	if out := machineCommand(t, svc, se.ID, "echo y >> /root/kept 2>/dev/null; echo $?", 0); out == "0\n" {
		t.Fatal("the user wrote into root's home")
	}

	for _, bad := range []service.CommandRequest{
		{Owner: "o", User: "root", Command: "id -u"},                  // a stateless command
		{SessionID: se.ID, Owner: "o", User: "bob", Command: "id -u"}, // no such user
	} {
		_, err := svc.RunCommand(ctx, bad)
		if !errors.Is(err, service.ErrInvalidRequest) || !strings.Contains(err.Error(), "user") {
			t.Errorf("user %q, session %q: %v", bad.User, bad.SessionID, err)
		}
	}
	plain, err := svc.CreateSession(ctx, service.SessionRequest{Owner: "o"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := svc.RunCommand(ctx, service.CommandRequest{SessionID: plain.ID, Owner: "o", User: "root", Command: "id -u"}); !errors.Is(err, service.ErrInvalidRequest) || !strings.Contains(err.Error(), "machine session") {
		t.Errorf("root in a session that is no machine: %v", err)
	}

	// A process root leaves running ends with the session, on the host.
	if _, err := svc.RunCommand(ctx, service.CommandRequest{SessionID: se.ID, Owner: "o", User: "root", Command: "nohup sleep 300 >/dev/null 2>&1 &"}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "root's sleep, as the block's first id", func() bool { return hasRootSleep(blockProcesses(first), first) })
	if err := svc.CloseSession(ctx, se.ID, "o"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the block's processes to end", func() bool { return len(blockProcesses(first)) == 0 })
	if _, err := os.Stat(found[0]); !os.IsNotExist(err) {
		t.Errorf("the closed session's workspace is still there: %v", err)
	}
}

func hasRootSleep(ps []leftovers.Process, first int) bool {
	for _, p := range ps {
		if p.Name == "sleep" && p.UID() == first {
			return true
		}
	}
	return false
}

// SANDBOX_MACHINE_ROOT off: a machine's processes all run as its user;
// root is refused, naming the setting, and there is no sudo.
func TestMachineRootOff(t *testing.T) {
	svc, _, se := nativeMachine(t, func(c *config.Config) { c.MachineRoot = false })
	_, err := svc.RunCommand(context.Background(), service.CommandRequest{SessionID: se.ID, Owner: "o", User: "root", Command: "id -u"})
	if !errors.Is(err, service.ErrInvalidRequest) || !strings.Contains(err.Error(), "SANDBOX_MACHINE_ROOT") {
		t.Fatalf("root with SANDBOX_MACHINE_ROOT off: %v", err)
	}
	if out := machineCommand(t, svc, se.ID, "id -u; command -v sudo || echo no sudo; touch /usr/local/x 2>/dev/null || echo read-only", 0); out != "1000\nno sudo\nread-only\n" {
		t.Fatalf("a machine without root: %q", out)
	}
}

// A command that dies of a signal says which, in a machine and in a
// command jail of its own: E2B's end event says "signal: ..." from it.
func TestCommandSignalIsReported(t *testing.T) {
	svc, _, se := nativeMachine(t, nil)
	for _, id := range []string{se.ID, ""} {
		res, err := svc.RunCommand(context.Background(), service.CommandRequest{SessionID: id, Owner: "o", Command: "kill -SEGV $$"})
		if err != nil {
			t.Fatal(err)
		}
		if res.Success || res.ExitCode != -1 || res.Signal != 11 || res.Error == nil || !strings.Contains(*res.Error, "signal 11 (segmentation fault)") {
			t.Errorf("session %q: exit %d signal %d error %v", id, res.ExitCode, res.Signal, res.Error)
		}
	}
}

// A machine's command that the OOM killer ends (the session's memory
// limit) says so: oom_killed and the memory limit, as a run's would.
func TestMachineCommandOOMIsReported(t *testing.T) {
	svc, _, se := nativeMachine(t, func(c *config.Config) { c.MemoryLimit = 128 << 20 })
	res, err := svc.RunCommand(context.Background(), service.CommandRequest{SessionID: se.ID, Owner: "o", Command: `python3 -c "b = b'x' * (1 << 30)"`})
	if err != nil {
		t.Fatal(err)
	}
	if res.Success || !res.OOMKilled || res.Limit == nil || *res.Limit != "memory" {
		t.Fatalf("a command past the machine's memory: success %v oom %v limit %v exit %d signal %d error %v stderr %q", res.Success, res.OOMKilled, res.Limit, res.ExitCode, res.Signal, *res.Error, res.Stderr)
	}
	if out := machineCommand(t, svc, se.ID, "echo still here", 0); out != "still here\n" {
		t.Fatalf("the machine after its command's OOM: %q", out)
	}
}

// A machine's command is the OOM killer's first choice from its first
// instruction (the shell reads its own score before anything else runs),
// and the init that forked it keeps its own score: a command that
// allocates at once is what the OOM killer ends, never the interpreter.
// The init's, read on the host, is the server's, as before any fork.
func TestMachineCommandIsTheOOMKillersFirstChoice(t *testing.T) {
	svc, _, se := nativeMachine(t, nil)
	for i := 0; i < 20; i++ {
		if out := machineCommand(t, svc, se.ID, "read s < /proc/self/oom_score_adj; echo $s", 0); out != "1000\n" {
			t.Fatalf("try %d: a command starts with OOM score %q, want 1000", i, out)
		}
	}
	machineCommand(t, svc, se.ID, "sleep 6161 >/dev/null 2>&1 &", 0)
	pid := waitForProcess(t, "sleep", "6161")
	own, _ := os.ReadFile("/proc/self/oom_score_adj")
	init := strconv.Itoa(pid)
	for i := 0; i < 8; i++ { // up to the machine's init, by its name
		if b, _ := os.ReadFile("/proc/" + init + "/cmdline"); strings.HasPrefix(string(b), "codecage-init\x00") {
			break
		}
		init = hostStatus(t, mustAtoi(t, init))["PPid"]
	}
	got, err := os.ReadFile("/proc/" + init + "/oom_score_adj")
	if err != nil || strings.TrimSpace(string(got)) != strings.TrimSpace(string(own)) {
		t.Fatalf("the machine's init (pid %s) has OOM score %q (%v), want the server's %q", init, got, err, own)
	}
	if got, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/oom_score_adj"); strings.TrimSpace(string(got)) != "1000" {
		t.Fatalf("the background sleep has OOM score %q", got)
	}
}

// A fork bomb run as root inside a machine is contained: its command
// ends, the session then either answers or says its sandbox has ended,
// and on close the host keeps nothing of it. Root's processes may fill
// the cgroup's pids.max (they have an RLIMIT_NPROC of their own beside
// the user's); the machine's init keeps threads ahead for that
// (warmThreads), but its interpreter may still fail to start one and end
// the machine, about 1 run in 8 (a child cgroup for the machine's
// processes is the fix, not made yet). So the machine's own survival is
// logged, not asserted.
func TestMachineForkBombAsRootIsContained(t *testing.T) {
	svc, _, se := nativeMachine(t, nil)
	bomb := "import os, time\nend = time.time() + 4\nwhile time.time() < end:\n    try:\n        os.fork()\n    except OSError:\n        pass\nos._exit(0)"
	res, err := svc.RunCommand(context.Background(), service.CommandRequest{SessionID: se.ID, Owner: "o", User: "root", Timeout: 60 * time.Second,
		Argv: []string{"python3", "-c", bomb}})
	if err != nil {
		t.Fatal(err)
	}
	if res.Limit != nil {
		t.Logf("the fork bomb ended the machine (%s): the known case above", *res.Limit)
	}
	waitFor(t, "the session to answer, or to say its sandbox ended, after the bomb", func() bool {
		r, err := svc.RunCommand(context.Background(), service.CommandRequest{SessionID: se.ID, Owner: "o", Command: "echo alive"})
		if errors.Is(err, service.ErrSessionEnded) {
			t.Logf("the machine ended with the bomb: %v", err)
			return true
		}
		return err == nil && r.Stdout == "alive\n"
	})
	if err := svc.CloseSession(context.Background(), se.ID, "o"); err != nil {
		t.Fatal(err)
	}
	assertNoLeftovers(t)
}

// A machine's command whose sandbox ends under it (here its interpreter
// is killed from the host, as root's kill -9 -1 does from inside) says
// so, not merely "canceled".
func TestMachineCommandSaysItsSandboxEnded(t *testing.T) {
	svc, _, se := nativeMachine(t, nil)
	done := make(chan *service.CommandResult, 1)
	go func() {
		res, err := svc.RunCommand(context.Background(), service.CommandRequest{SessionID: se.ID, Owner: "o", Command: "sleep 7373"})
		if err != nil {
			t.Errorf("RunCommand: %v", err)
		}
		done <- res
	}()
	sleep := waitForProcess(t, "sleep", "7373")
	// The machine's init is the sleep's nearest ancestor whose child is
	// the interpreter (python3): its program, whose end is the machine's.
	procs := leftovers.HostProcesses()
	parent := map[int]int{}
	for _, p := range procs {
		parent[p.PID] = p.PPID
	}
	interpreter := 0
	for pid := parent[sleep]; pid > 1 && interpreter == 0; pid = parent[pid] {
		for _, p := range procs {
			if p.PPID == pid && p.Name == "python3" {
				interpreter = p.PID
			}
		}
	}
	if interpreter == 0 {
		t.Fatal("no interpreter beside the command on the host")
	}
	if err := syscall.Kill(interpreter, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	res := <-done
	if res == nil {
		return
	}
	if res.Success || res.Limit == nil || *res.Limit != "canceled" || res.Error == nil || !strings.Contains(*res.Error, "sandbox ended under the command") {
		t.Fatalf("the command whose machine ended: success %v limit %v error %v", res.Success, res.Limit, res.Error)
	}
}

func mustAtoi(t *testing.T, s string) int {
	t.Helper()
	n, err := strconv.Atoi(s)
	if err != nil {
		t.Fatal(err)
	}
	return n
}
