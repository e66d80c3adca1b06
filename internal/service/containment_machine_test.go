package service_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/codecage/codecage/internal/config"
	"github.com/codecage/codecage/internal/hostproc"
	"github.com/codecage/codecage/internal/policy"
	"github.com/codecage/codecage/internal/service"
)

// Machine sessions (docs/sessions.md): every command runs in the
// session's own process tree, from an exec-able workspace. These rows
// hold in that mode, judged from the host. Machines run on the native
// backend: under gVisor each row checks that none is given.

// machineService is the suite's service, on the suite's backend (both
// give machines).
func machineService(t *testing.T) (*service.Service, config.Config) {
	t.Helper()
	cfg := service.LeanTestConfig()
	cfg.AllowedImports = []string{policy.AllImports}
	applyTestEnvironment(t, &cfg)
	cfg.Isolation = testBackend(t)
	return newServiceAsIs(t, cfg), cfg
}

func newMachine(t *testing.T, svc *service.Service) string {
	t.Helper()
	se, err := svc.CreateSession(context.Background(), service.SessionRequest{Owner: "o", Machine: true})
	if err != nil {
		t.Fatal(err)
	}
	return se.ID
}

// hostStatus reads fields of a host process's status file.
func hostStatus(t *testing.T, pid int) map[string]string {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok {
			out[k] = strings.Join(strings.Fields(v), " ")
		}
	}
	return out
}

// A set-user-ID root binary the host's root left in a machine's
// workspace (where a machine may execute) gives nothing: the workspace is
// nosuid, and root is not even mapped. Judged from the host by the
// process's own credentials and capabilities.
func TestContainment_48_SetUIDBinaryInAMachineGivesNothing(t *testing.T) {
	svc, cfg := machineService(t)
	id := newMachine(t, svc)
	mark := "mark-" + randomToken(t)
	if _, err := svc.WriteFile(context.Background(), id, "o", mark, []byte("x")); err != nil {
		t.Fatal(err)
	}
	found, _ := filepath.Glob(filepath.Join(cfg.StateDir, "sessions", "*", mark))
	if len(found) != 1 {
		t.Fatalf("the machine's workspace: %v", found)
	}
	planted := filepath.Join(filepath.Dir(found[0]), "suid-sleep")
	copyFile(t, "/bin/sleep", planted)
	if err := os.Chown(planted, 0, 0); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(planted, 0o4755|0o111); err != nil {
		t.Fatal(err)
	}
	uid := strconv.Itoa(workspaceUIDOf(t, filepath.Dir(found[0])))
	if onGVisor() {
		// The process is one of gVisor's kernel, which the host does not
		// see: that kernel's account of it, once it has exec'ed, as the
		// user of the machine's block (1000 inside: root inside maps the
		// block), while the sandbox's host processes are the block's.
		host, _ := strconv.Atoi(uid)
		checkBlockProcesses(t, host-1000)
		uid = "1000"
		st := machineCommand(t, svc, id, `./suid-sleep 4646 >/dev/null 2>&1 & p=$!
until grep -q suid-sleep /proc/$p/comm 2>/dev/null; do sleep 0.02; done
grep -E '^(Uid|CapEff|NoNewPrivs):' /proc/$p/status | tr -s '\t ' ' '`, time.Minute)
		want := "Uid: " + strings.Repeat(uid+" ", 3) + uid + "\nCapEff: 0000000000000000\nNoNewPrivs: 1\n"
		if st != want {
			t.Fatalf("the planted binary runs with %q; want %q", st, want)
		}
		return
	}
	machineCommand(t, svc, id, "./suid-sleep 4646 >/dev/null 2>&1 &", 0)
	var p = waitForProcess(t, "suid-sleep", "4646")
	st := hostStatus(t, p)
	if st["Uid"] != strings.Repeat(uid+" ", 3)+uid || st["CapEff"] != "0000000000000000" || st["NoNewPrivs"] != "1" {
		t.Fatalf("the planted binary runs with Uid %q CapEff %q NoNewPrivs %q; want the sandbox's uid %s everywhere, no capability", st["Uid"], st["CapEff"], st["NoNewPrivs"], uid)
	}
}

// A process a machine's command leaves in the background cannot outlive
// its session: closing it ends the process, as the host sees.
func TestContainment_49_MachineBackgroundEndsWithItsSession(t *testing.T) {
	svc, _ := machineService(t)
	id := newMachine(t, svc)
	// Deaf to the signals a session's end might send first.
	machineCommand(t, svc, id, "sh -c 'trap \"\" HUP INT TERM; sleep 4747' >/dev/null 2>&1 &", 0)
	if onGVisor() {
		// A process of gVisor's kernel: its machine sees it; on close,
		// nothing of the sandbox is left on the host (below).
		machineCommand(t, svc, id, untilRunning("sleep 474[7]"), time.Minute)
		if err := svc.CloseSession(context.Background(), id, "o"); err != nil {
			t.Fatal(err)
		}
		assertNoLeftovers(t)
		return
	}
	waitForProcess(t, "sleep", "4747")
	if err := svc.CloseSession(context.Background(), id, "o"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the background process to end with its session", func() bool { return hostProcessNamed("sleep", "4747") == nil })
	assertNoLeftovers(t)
}

// One machine cannot see another's processes: each has its own pid
// namespace (the host compares them), and one's /proc lists nothing of
// the other's.
func TestContainment_50_MachinesDoNotSeeEachOther(t *testing.T) {
	svc, _ := machineService(t)
	a, b := newMachine(t, svc), newMachine(t, svc)
	machineCommand(t, svc, a, "sleep 4848 >/dev/null 2>&1 &", 0)
	machineCommand(t, svc, b, "sleep 4949 >/dev/null 2>&1 &", 0)
	if onGVisor() {
		machinesApartOnGVisor(t, svc, a, b)
		return
	}
	pa, pb := waitForProcess(t, "sleep", "4848"), waitForProcess(t, "sleep", "4949")
	nsA, _ := os.Readlink("/proc/" + strconv.Itoa(pa) + "/ns/pid")
	nsB, _ := os.Readlink("/proc/" + strconv.Itoa(pb) + "/ns/pid")
	if nsA == "" || nsA == nsB {
		t.Fatalf("the machines share a pid namespace: %q %q", nsA, nsB)
	}
	seen := machineCommand(t, svc, b, "cat /proc/[0-9]*/cmdline | tr '\\0' ' '", 0)
	if strings.Contains(seen, "4848") || !strings.Contains(seen, "4949") {
		t.Fatalf("machine b's /proc shows %q", seen)
	}
	// Nor its root: what a writes at the top of its tree is in a's root
	// and not in b's, as the host sees each through its process's root.
	machineCommand(t, svc, a, "echo a > /only-in-a-5050", 0)
	if _, err := os.Stat("/proc/" + strconv.Itoa(pa) + "/root/only-in-a-5050"); err != nil {
		t.Fatalf("a's file is not in a's root: %v", err)
	}
	if _, err := os.Stat("/proc/" + strconv.Itoa(pb) + "/root/only-in-a-5050"); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a's file in b's root: %v", err)
	}
	if out := machineCommand(t, svc, b, "ls -a / | tr '\\n' ' '; test -e /only-in-a-5050 || echo absent", 0); strings.Contains(out, "only-in-a") || !strings.HasSuffix(out, "absent\n") {
		t.Fatalf("machine b sees a's root: %q", out)
	}
}

// waitForProcess waits for the host's process named name whose command
// line holds marker, and returns its pid.
func waitForProcess(t *testing.T, name, marker string) int {
	t.Helper()
	pid := 0
	waitFor(t, name+" "+marker+" on the host", func() bool {
		if p := hostProcessNamed(name, marker); p != nil {
			pid = p.PID
		}
		return pid != 0
	})
	return pid
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	in, err := os.Open(from)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := os.Create(to)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
}

// A machine's /proc has what ps, top and free read, and shows the machine:
// its meminfo's total is its cgroup's limit (read on the host), never the
// host's memory, and every other host-wide entry is covered (the host
// reads the machine's mount table).
func TestContainment_51_MachineProcShowsTheMachineNotTheHost(t *testing.T) {
	svc, _ := machineService(t)
	id := newMachine(t, svc)
	if onGVisor() {
		gvisorProcIsItsKernels(t, svc, id)
		return
	}
	machineCommand(t, svc, id, "sleep 5151 >/dev/null 2>&1 &", 0)
	pid := waitForProcess(t, "sleep", "5151")
	limit := hostMemoryLimit(t, pid)
	seen := machineCommand(t, svc, id, "grep MemTotal /proc/meminfo; cat /proc/kallsyms /proc/cpuinfo /proc/version /proc/sched_debug /proc/timer_list 2>/dev/null | wc -c; ls /proc/sys | wc -l", 0)
	want := fmt.Sprintf("MemTotal:       %14d kB\n0\n0\n", limit>>10)
	if !strings.HasPrefix(seen, want) {
		t.Fatalf("the machine's /proc says %q; want its limit %d and nothing of the host's: %q...", seen, limit, want)
	}
	if hostMem, _ := os.ReadFile("/proc/meminfo"); strings.Fields(string(hostMem))[1] == strconv.FormatInt(limit>>10, 10) {
		t.Fatalf("the machine's limit is the host's memory: the test proves nothing")
	}
	uncovered, err := hostproc.Uncovered(pid)
	if err != nil || len(uncovered) > 0 {
		t.Fatalf("host-wide /proc entries the kernel's in the machine, not covered: %v (%v)", uncovered, err)
	}
}

// hostMemoryLimit is the memory limit of a host process's cgroup, read on
// the host (v1's memory hierarchy, or v2's).
func hostMemoryLimit(t *testing.T, pid int) int64 {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	var file string
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		parts := strings.SplitN(line, ":", 3)
		switch {
		case len(parts) != 3:
		case slices.Contains(strings.Split(parts[1], ","), "memory"):
			file = filepath.Join("/sys/fs/cgroup/memory", parts[2], "memory.limit_in_bytes")
		case parts[0] == "0" && file == "":
			file = filepath.Join("/sys/fs/cgroup", parts[2], "memory.max")
		}
	}
	v, err := os.ReadFile(file)
	if err != nil {
		t.Fatalf("the memory limit of pid %d: %v", pid, err)
	}
	n, err := strconv.ParseInt(strings.TrimSpace(string(v)), 10, 64)
	if err != nil {
		t.Fatalf("the memory limit of pid %d in %s: %q", pid, file, v)
	}
	return n
}

// machinesApartOnGVisor is row 50 for two gVisor machines, each its own
// kernel: one's processes and root are not in the other, and what one
// writes at the top of its tree is not on the host either.
func machinesApartOnGVisor(t *testing.T, svc *service.Service, a, b string) {
	t.Helper()
	machineCommand(t, svc, a, untilRunning("sleep 484[8]"), time.Minute)
	seen := machineCommand(t, svc, b, untilRunning("sleep 494[9]")+"; cat /proc/[0-9]*/cmdline | tr '\\0' ' '", time.Minute)
	if strings.Contains(seen, "4848") || !strings.Contains(seen, "4949") {
		t.Fatalf("machine b's /proc shows %q", seen)
	}
	machineCommand(t, svc, a, "echo a > /only-in-a-5050 && test -e /only-in-a-5050", time.Minute)
	if out := machineCommand(t, svc, b, "test -e /only-in-a-5050 || echo absent", time.Minute); out != "absent\n" {
		t.Fatalf("machine b sees a's root: %q", out)
	}
	if _, err := os.Lstat("/only-in-a-5050"); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a's file is on the host: %v", err)
	}
}

// gvisorProcIsItsKernels is row 51 for a gVisor machine, whose /proc is
// gVisor's kernel's own (ps, top and free read it: TestGVisorMachineIsOneProcessTree):
// its kernel's version and symbols are not the host's. (Its MemTotal is
// the host's memory: runsc sizes it from a cgroup it is told to ignore.)
// Read with cat alone, which every root has.
func gvisorProcIsItsKernels(t *testing.T, svc *service.Service, id string) {
	t.Helper()
	version := strings.TrimSpace(machineCommand(t, svc, id, "cat /proc/version", time.Minute))
	hostVersion, _ := os.ReadFile("/proc/version")
	if version == "" || strings.TrimSpace(string(hostVersion)) == version {
		t.Errorf("the machine's /proc/version is %q, the host's %q", version, hostVersion)
	}
	if syms := machineCommand(t, svc, id, "cat /proc/kallsyms 2>/dev/null | wc -c", time.Minute); strings.TrimSpace(syms) != "0" {
		t.Errorf("the machine's /proc/kallsyms has %s bytes", syms)
	}
}

// untilRunning is a command line that waits until a process of the
// machine has pattern in its command line; the pattern holds a bracket
// ("sleep 474[7]") so that the waiting shell's own line never matches.
// It reads /proc with cat, tr and grep, which every root has.
func untilRunning(pattern string) string {
	return "until for f in /proc/[0-9]*/cmdline; do tr '\\0' ' ' < $f; echo; done 2>/dev/null | grep -q '" + pattern + "'; do sleep 0.02; done"
}
