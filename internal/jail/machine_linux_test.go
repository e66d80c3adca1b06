package jail

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/codecage/codecage/internal/hostproc"
)

// startMachine starts a machine whose program waits for ever (the
// session's interpreter, in a service).
func startMachine(t *testing.T, spec Spec) *Sandbox {
	t.Helper()
	spec.Machine = true
	if spec.Argv == nil {
		spec.Argv = []string{"/bin/sleep", "infinity"}
	}
	spec.Limits.Timeout = time.Minute
	sb, err := Start(context.Background(), spec)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() {
		sb.Kill(LimitNone)
		sb.Wait()
		sb.Channel().Close()
	})
	return sb
}

// spawnAndWait runs argv in the machine and returns its exit and output.
func spawnAndWait(t *testing.T, sb *Sandbox, argv ...string) (ProcExit, string, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	p, err := sb.Spawn(ProcSpec{Argv: argv, Env: []string{"PATH=/usr/bin:/bin"}, Dir: WorkspaceDir, Stdout: &out, Stderr: &errOut})
	if err != nil {
		t.Fatalf("Spawn %q: %v", argv, err)
	}
	return p.Wait(), out.String(), errOut.String()
}

// hostProcessesOf lists the host's processes running as uid: the
// machine's, judged from outside it.
func hostProcessesOf(uid int) []string {
	entries, _ := os.ReadDir("/proc")
	var out []string
	for _, e := range entries {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "status"))
		if err != nil {
			continue
		}
		var name string
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "Name:"); ok {
				name = strings.TrimSpace(v)
			}
			if v, ok := strings.CutPrefix(line, "Uid:"); ok {
				if f := strings.Fields(v); len(f) > 0 && f[0] == strconv.Itoa(uid) {
					out = append(out, e.Name()+":"+name)
				}
			}
		}
	}
	return out
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestMachineRunsProcessesInOneTree(t *testing.T) {
	sb := startMachine(t, Spec{})
	exit, out, errOut := spawnAndWait(t, sb, "/bin/sh", "-c", "echo hi; echo oops >&2; exit 3")
	if exit.ExitCode != 3 || out != "hi\n" || errOut != "oops\n" {
		t.Fatalf("exit %+v out %q err %q", exit, out, errOut)
	}
	// A process left in the background outlives its command: the next
	// command sees it, and so does the host, under the machine's uid.
	exit, out, _ = spawnAndWait(t, sb, "/bin/sh", "-c", "sleep 1000 & echo $!")
	if exit.ExitCode != 0 {
		t.Fatalf("exit %+v", exit)
	}
	bg := strings.TrimSpace(out)
	exit, out, _ = spawnAndWait(t, sb, "/bin/sh", "-c", "cat /proc/"+bg+"/comm")
	if exit.ExitCode != 0 || out != "sleep\n" {
		t.Fatalf("the background process is gone from the machine: exit %+v out %q", exit, out)
	}
	host := hostProcessesOf(sb.HostUID())
	if !strings.Contains(strings.Join(host, " "), ":sleep") {
		t.Fatalf("the host sees no background sleep under uid %d: %v", sb.HostUID(), host)
	}
	// The machine's end takes it along: nothing of its uid is left.
	sb.Kill(LimitNone)
	sb.Wait()
	waitFor(t, "the machine's processes to go", func() bool { return len(hostProcessesOf(sb.HostUID())) == 0 })
}

func TestMachineProcessEndsWithoutItsBackground(t *testing.T) {
	sb := startMachine(t, Spec{})
	// The background process holds the command's stdout: the command
	// still ends when its own process does, with its output.
	start := time.Now()
	exit, out, _ := spawnAndWait(t, sb, "/bin/sh", "-c", "echo first; sleep 1000 &")
	if exit.ExitCode != 0 || out != "first\n" {
		t.Fatalf("exit %+v out %q", exit, out)
	}
	if took := time.Since(start); took > 10*time.Second {
		t.Fatalf("the command waited %v for what it left behind", took)
	}
}

func TestMachineExecutesFromItsWorkspaceAndTmp(t *testing.T) {
	sb := startMachine(t, Spec{})
	exit, out, errOut := spawnAndWait(t, sb, "/bin/sh", "-c",
		`printf '#!/bin/sh\necho ran $0\n' > run.sh && chmod +x run.sh && ./run.sh && cp run.sh /tmp/t.sh && /tmp/t.sh`)
	if exit.ExitCode != 0 || out != "ran ./run.sh\nran /tmp/t.sh\n" {
		t.Fatalf("exit %+v out %q err %q", exit, out, errOut)
	}
	// Set-user-ID bits mean nothing there (nosuid), and the rest of the
	// root stays read-only.
	exit, _, errOut = spawnAndWait(t, sb, "/bin/sh", "-c", "touch /usr/x")
	if exit.ExitCode == 0 {
		t.Fatalf("the machine wrote to /usr: %q", errOut)
	}
}

func TestMachineProcessSignalsInputAndOutputCap(t *testing.T) {
	sb := startMachine(t, Spec{})
	p, err := sb.Spawn(ProcSpec{Argv: []string{"/bin/sleep", "1000"}, Dir: "/"})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if exit := p.Wait(); exit.Signal != int(syscall.SIGTERM) || exit.SandboxEnded {
		t.Fatalf("exit %+v", exit)
	}

	var out bytes.Buffer
	p, err = sb.Spawn(ProcSpec{Argv: []string{"/bin/cat"}, Dir: "/", Stdin: true, Stdout: &out})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.WriteInput([]byte("typed\n"), time.Second); err != nil {
		t.Fatal(err)
	}
	if err := p.CloseInput(); err != nil {
		t.Fatal(err)
	}
	if exit := p.Wait(); exit.ExitCode != 0 || out.String() != "typed\n" {
		t.Fatalf("exit %+v out %q", exit, out.String())
	}

	out.Reset()
	p, err = sb.Spawn(ProcSpec{Argv: []string{"/usr/bin/yes"}, Dir: "/", Stdout: &out, OutputBytes: 1000})
	if err != nil {
		t.Fatal(err)
	}
	if exit := p.Wait(); !exit.Truncated || exit.Signal != int(syscall.SIGKILL) || out.Len() != 1000 {
		t.Fatalf("exit %+v, %d bytes", exit, out.Len())
	}
	// The machine lives on.
	if exit, out, _ := spawnAndWait(t, sb, "/bin/echo", "alive"); exit.ExitCode != 0 || out != "alive\n" {
		t.Fatalf("exit %+v out %q", exit, out)
	}
}

func TestMachineRefusesWhatCannotStart(t *testing.T) {
	sb := startMachine(t, Spec{})
	if _, err := sb.Spawn(ProcSpec{Argv: []string{"/no/such"}, Dir: "/"}); err == nil || !strings.Contains(err.Error(), "/no/such") {
		t.Fatalf("err %v", err)
	}
	if _, err := sb.Spawn(ProcSpec{}); err == nil {
		t.Fatal("an empty argv was started")
	}
	// A sandbox that is no machine starts nothing beside its program.
	plain, err := Start(context.Background(), Spec{Argv: []string{"/bin/sleep", "1000"}})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { plain.Kill(LimitNone); plain.Wait(); plain.Channel().Close() }()
	if _, err := plain.Spawn(ProcSpec{Argv: []string{"/bin/true"}}); err == nil {
		t.Fatal("a plain sandbox spawned")
	}
	// Once the machine has ended, so have its spawns.
	sb.Kill(LimitNone)
	sb.Wait()
	if _, err := sb.Spawn(ProcSpec{Argv: []string{"/bin/true"}, Dir: "/"}); err == nil {
		t.Fatal("an ended machine spawned")
	}
}

// A machine's process may run on a terminal of the machine's own devpts:
// its controlling terminal, sized as asked, typed into and resized.
func TestMachineProcessOnATerminal(t *testing.T) {
	sb := startMachine(t, Spec{})
	var out lockedBuffer
	p, err := sb.Spawn(ProcSpec{Argv: []string{"/bin/sh", "-c", "tty; stty size; read x; echo got $x; stty size"},
		Env: []string{"PATH=/usr/bin:/bin"}, Dir: "/", Stdout: &out, Terminal: &WindowSize{Cols: 80, Rows: 24}})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the terminal's size", func() bool { return strings.Contains(out.String(), "24 80") })
	if err := p.Resize(WindowSize{Cols: 100, Rows: 30}); err != nil {
		t.Fatal(err)
	}
	if _, err := p.WriteInput([]byte("hello\n"), time.Second); err != nil {
		t.Fatal(err)
	}
	exit := p.Wait()
	got := out.String()
	if exit.ExitCode != 0 || !strings.Contains(got, "/dev/pts/") || !strings.Contains(got, "got hello") || !strings.Contains(got, "30 100") {
		t.Fatalf("exit %+v, the terminal showed %q", exit, got)
	}
}

// A machine's own root is its /, writable: what its processes make at the
// top of the tree lands in the host directory and stays for the next
// start; the skeleton (/etc, the system directories) is rebuilt over it,
// the system directories stay read-only, and the host's files never change.
func TestMachineRootIsWritableAndKept(t *testing.T) {
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o777); err != nil { // the sandbox's host uid is not ours
		t.Fatal(err)
	}
	hostsBefore, _ := os.ReadFile("/etc/hosts")
	sb := startMachine(t, Spec{MachineRoot: dir})
	exit, out, errOut := spawnAndWait(t, sb, "/bin/sh", "-c",
		"mkdir /app && echo kept > /app/f && echo '10.9.8.7 mine' >> /etc/hosts && grep -c mine /etc/hosts && touch /usr/x; echo usr $?")
	if exit.ExitCode != 0 || out != "1\nusr 1\n" {
		t.Fatalf("exit %+v out %q err %q", exit, out, errOut)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "app", "f")); err != nil || string(b) != "kept\n" {
		t.Fatalf("the host's copy of /app/f: %q %v", b, err)
	}
	if b, _ := os.ReadFile("/etc/hosts"); !bytes.Equal(b, hostsBefore) {
		t.Fatal("the host's /etc/hosts changed")
	}
	sb.Kill(LimitNone)
	sb.Wait()

	again := startMachine(t, Spec{MachineRoot: dir})
	exit, out, errOut = spawnAndWait(t, again, "/bin/sh", "-c", "cat /app/f; grep -c mine /etc/hosts")
	if exit.ExitCode != 1 || out != "kept\n0\n" {
		t.Fatalf("after a restart: exit %+v out %q err %q", exit, out, errOut)
	}
}

// TestMachineProcShowsTheMachine: ps, top, free and uptime work in a
// machine, and show its own processes and its cgroup's memory, never the
// host's; every other host-wide proc entry is covered, as the host sees in
// the machine's mount table.
func TestMachineProcShowsTheMachine(t *testing.T) {
	const limit = 200 << 20
	sb := startMachine(t, Spec{Limits: Limits{MemoryBytes: limit}})
	for _, argv := range [][]string{{"/usr/bin/ps", "aux"}, {"/usr/bin/top", "-b", "-n", "1"}, {"/usr/bin/uptime"}, {"/usr/bin/free"}} {
		exit, out, errOut := spawnAndWait(t, sb, argv...)
		if exit.ExitCode != 0 {
			t.Errorf("%q: exit %+v, out %q, err %q", argv, exit, out, errOut)
		}
		t.Logf("%s:\n%s", strings.Join(argv, " "), out)
	}

	// free: the limit is the total; 60 MB more in /tmp (a tmpfs the
	// machine's memory pays for) shows as used.
	free := func() (total, used int64) {
		t.Helper()
		exit, out, errOut := spawnAndWait(t, sb, "/usr/bin/free", "-b")
		for _, line := range strings.Split(out, "\n") {
			if f := strings.Fields(line); len(f) >= 3 && f[0] == "Mem:" {
				total, _ = strconv.ParseInt(f[1], 10, 64)
				used, _ = strconv.ParseInt(f[2], 10, 64)
				return total, used
			}
		}
		t.Fatalf("free -b: exit %+v, out %q, err %q", exit, out, errOut)
		return 0, 0
	}
	total, before := free()
	if total != limit {
		t.Fatalf("free's total is %d, not the machine's limit %d", total, limit)
	}
	if exit, _, errOut := spawnAndWait(t, sb, "/bin/sh", "-c", "head -c 60000000 /dev/urandom > /tmp/fill"); exit.ExitCode != 0 {
		t.Fatalf("fill /tmp: %+v %s", exit, errOut)
	}
	if _, after := free(); sb.cg != nil && after-before < 50_000_000 {
		t.Fatalf("60 MB more in /tmp, but free's used went from %d to %d (the cgroup holds %d)", before, after, sb.MemoryUsage())
	}

	// ps lists the machine's processes, each by its pid inside: the host
	// finds the same ones under the machine's uid (NSpid's last field).
	exit, out, errOut := spawnAndWait(t, sb, "/usr/bin/ps", "-e", "-o", "pid=,comm=")
	if exit.ExitCode != 0 {
		t.Fatalf("ps: exit %+v err %q", exit, errOut)
	}
	var listed []string
	initName := ""
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if f := strings.Fields(line); len(f) == 2 && f[1] != "ps" {
			listed = append(listed, f[0])
			if f[0] == "1" {
				initName = f[1]
			}
		}
	}
	// The init has a name (executed through a descriptor, it was "5"),
	// inside and on the host.
	if comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", sb.cmd.Process.Pid)); initName != "codecage-init" || strings.TrimSpace(string(comm)) != "codecage-init" {
		t.Errorf("the init is %q to ps inside, %q on the host", initName, comm)
	}
	var host []string
	for _, p := range hostProcessesOf(sb.HostUID()) {
		pid, _, _ := strings.Cut(p, ":")
		b, _ := os.ReadFile("/proc/" + pid + "/status")
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "NSpid:"); ok {
				f := strings.Fields(v)
				host = append(host, f[len(f)-1])
			}
		}
	}
	if strings.Join(listed, " ") != strings.Join(host, " ") {
		t.Fatalf("ps lists pids %v; the host finds the machine's processes at %v", listed, host)
	}

	// From the host: over each host-wide entry of the machine's proc is a
	// mount of its own (a cover), and the machine cannot write them.
	uncovered, err := hostproc.Uncovered(sb.cmd.Process.Pid)
	if err != nil || len(uncovered) > 0 {
		t.Fatalf("host-wide /proc entries the kernel's in the machine, not covered: %v (%v)", uncovered, err)
	}
	if exit, _, _ := spawnAndWait(t, sb, "/bin/sh", "-c", "echo 1 > /proc/meminfo || echo 1 > /proc/sysrq-trigger"); exit.ExitCode == 0 {
		t.Fatal("the machine wrote over its /proc's covers")
	}
}

// A machine whose processes take every process they may keeps its init:
// the host finds room left in its cgroup's pids.max for the init's
// threads, the machine lives through orders while its limit is spent, and
// it starts processes again once the host has killed the bomb's.
func TestMachineAtItsProcessLimitKeepsItsInit(t *testing.T) {
	sb := startMachine(t, Spec{Limits: Limits{MaxProcesses: 16}})
	idle := int64(-1) // the machine's tasks before the bomb: its init's threads
	if sb.cg != nil {
		idle = sb.cg.readInt(cgPidsCurrent)
	}
	bomb, err := sb.Spawn(ProcSpec{Argv: []string{"/bin/sh", "-c", "while :; do sleep 1000 & done"}, Env: []string{"PATH=/usr/bin:/bin"}, Dir: WorkspaceDir})
	if err != nil {
		t.Fatal(err)
	}
	// From the host: the bomb fills what its processes may take, and
	// the cgroup still has room for the init's threads.
	if sb.cg == nil {
		t.Fatal("no cgroup: the host cannot count the machine's tasks")
	}
	waitFor(t, "the bomb to reach the process limit", func() bool { return sb.cg.readInt(cgPidsCurrent) >= 16 })
	for stable, last := 0, int64(-1); stable < 5; time.Sleep(20 * time.Millisecond) {
		if n := sb.cg.readInt(cgPidsCurrent); n == last {
			stable++
		} else {
			stable, last = 0, n
		}
	}
	if room := sb.cg.readInt(cgPidsMax) - sb.cg.readInt(cgPidsCurrent); room < MachineThreads/2 {
		t.Fatalf("the machine's processes left %d tasks of pids.max to its init", room)
	}
	// Orders keep the init's threads busy while the limit is spent:
	// spawns that fail, and signals.
	refused := 0
	for i := 0; i < 50; i++ {
		p, err := sb.Spawn(ProcSpec{Argv: []string{"/bin/sleep", "1000"}, Dir: WorkspaceDir})
		if err == nil {
			defer p.Signal(syscall.SIGKILL)
			continue
		}
		if !errors.Is(err, unix.EAGAIN) && !strings.Contains(err.Error(), "temporarily unavailable") {
			t.Fatalf("a spawn at the limit: %v", err)
		}
		refused++
	}
	if room := sb.cg.readInt(cgPidsMax) - sb.cg.readInt(cgPidsCurrent); refused == 0 || room < MachineThreads/2 {
		t.Fatalf("spawns at the limit: %d of 50 refused, and %d tasks of pids.max left to the init", refused, room)
	}
	select {
	case <-sb.Done():
		t.Fatalf("the machine ended at its process limit: %+v", sb.Wait())
	default:
	}
	// The loop ended when a fork failed; its sleeps are the init's now.
	// The host kills them, and the machine starts processes again.
	bomb.Wait()
	pids, err := sb.cg.procs()
	if err != nil {
		t.Fatal(err)
	}
	for _, pid := range pids {
		if b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid)); strings.HasSuffix(string(b), "sleep\x001000\x00") {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
	waitFor(t, "the bomb's processes to be reaped", func() bool { return sb.cg.readInt(cgPidsCurrent) <= idle+2 })
	if exit, _, _ := spawnAndWait(t, sb, "/bin/sh", "-c", "true"); exit.ExitCode != 0 {
		t.Fatalf("after the bomb: %+v", exit)
	}
}
