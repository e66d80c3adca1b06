package service_test

import (
	"context"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/codecage/codecage/internal/config"
	"github.com/codecage/codecage/internal/jail"
	"github.com/codecage/codecage/internal/leftovers"
	"github.com/codecage/codecage/internal/policy"
	"github.com/codecage/codecage/internal/service"
)

// cellProc is a host process seen through /proc/<pid>/status and limits.
type cellProc struct {
	pid, uid    int
	pidNS       string
	sigBlk      uint64
	sigQ        string // "queued/limit" for the process's user
	maxProcSoft string
}

func hostSandboxProcs() []cellProc {
	ranges := jail.LeasedUIDRanges()
	var out []cellProc
	for _, hp := range leftovers.HostProcesses() {
		p := cellProc{pid: hp.PID, uid: hp.UID(), sigQ: hp.Status["SigQ"]}
		p.sigBlk, _ = strconv.ParseUint(hp.Status["SigBlk"], 16, 64)
		in := false
		for _, r := range ranges {
			in = in || (p.uid >= r[0] && p.uid < r[1])
		}
		if !in {
			continue
		}
		dir := "/proc/" + strconv.Itoa(p.pid)
		p.pidNS, _ = os.Readlink(dir + "/ns/pid")
		if l, err := os.ReadFile(dir + "/limits"); err == nil {
			for _, line := range strings.Split(string(l), "\n") {
				if rest, ok := strings.CutPrefix(line, "Max processes"); ok {
					if f := strings.Fields(rest); len(f) > 0 {
						p.maxProcSoft = f[0]
					}
				}
			}
		}
		out = append(out, p)
	}
	return out
}

// Two concurrent runs of two tenants in cells of one zygote: judged from
// the host, each cell runs as a host uid no other process of a sandbox
// has (the zygote's and the other cell's included), a per-user kernel
// count (pending signals) is not shared, and RLIMIT_NPROC bounds each
// cell again. The code still sees uid 1000.
func TestZygoteCellsHaveTheirOwnUIDs(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("root mode only: rootless cells share the caller's uid")
	}
	cfg := service.LeanTestConfig()
	cfg.AllowedImports = []string{policy.AllImports}
	cfg.Isolation = config.IsolationNative
	cfg.Zygote = true
	cfg.PoolSize, cfg.DataPoolSize, cfg.GVisorPoolSize, cfg.GVisorDataPoolSize = 2, 0, 0, 0
	svc := newServiceAsIs(t, cfg)
	waitFor(t, "two cells ready", func() bool { return svc.PoolStats()[policy.Basic].Ready == 2 })

	// Each run blocks its own real-time signal (how the host tells them
	// apart), A queues 100 of them, and both wait for SIGUSR1 from the
	// host (at most 15 s; a run within the class CPU time is served by the pool).
	const queued = 100
	code := func(sig string, n int) string {
		return `import os, signal
signal.pthread_sigmask(signal.SIG_BLOCK, [` + sig + `, signal.SIGUSR1])
for _ in range(` + strconv.Itoa(n) + `):
    os.kill(os.getpid(), ` + sig + `)
signal.sigtimedwait([signal.SIGUSR1], 15)
print("uid", os.getuid(), os.geteuid())`
	}
	sigA, sigB := uint64(1)<<(34-1), uint64(1)<<(35-1) // SIGRTMIN, SIGRTMIN+1
	var wg sync.WaitGroup
	results := make([]*service.Result, 2)
	for i, c := range []string{code("signal.SIGRTMIN", queued), code("signal.SIGRTMIN + 1", 0)} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := svc.Execute(context.Background(), service.Request{Code: c, AllowedImports: []string{"*"}, Timeout: 20 * time.Second})
			if err != nil {
				t.Errorf("Execute: %v", err)
			}
			results[i] = res
		}()
	}
	defer wg.Wait()

	var a, b *cellProc
	var all []cellProc
	for range 1000 {
		all = hostSandboxProcs()
		a, b = nil, nil
		for i := range all {
			p := &all[i]
			switch {
			case p.sigBlk&sigA != 0 && p.sigQ == strconv.Itoa(queued)+"/"+strings.Split(p.sigQ, "/")[1]:
				a = p
			case p.sigBlk&sigB != 0:
				b = p
			}
		}
		if a != nil && b != nil {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	wake := func() {
		for _, p := range all {
			if p.sigBlk&(sigA|sigB) != 0 {
				_ = syscall.Kill(p.pid, syscall.SIGUSR1)
			}
		}
	}
	if a == nil || b == nil {
		wake()
		t.Fatalf("the two runs' processes not found among %+v", all)
	}
	t.Logf("A %+v, B %+v", *a, *b)
	for _, p := range []*cellProc{a, b} {
		if !forkedByZygote(t, p.pid) {
			t.Fatalf("process %d is not the code of a zygote's cell: the pool did not serve the run", p.pid)
		}
	}
	if a.uid == b.uid {
		t.Errorf("two tenants' cells run as one host uid %d", a.uid)
	}
	for _, p := range all {
		if p.uid == a.uid && p.pidNS != a.pidNS || p.uid == b.uid && p.pidNS != b.pidNS {
			t.Errorf("process %d (pid namespace %s) shares host uid %d with a cell", p.pid, p.pidNS, p.uid)
		}
	}
	// The pending-signal count is per user: B's must not include A's.
	if q, _, _ := strings.Cut(b.sigQ, "/"); q != "0" {
		t.Errorf("B's user has %s signals queued (A queued %d): a per-user count is shared", q, queued)
	}
	if want := strconv.Itoa(cfg.MaxProcesses + 1); a.maxProcSoft != want || b.maxProcSoft != want {
		t.Errorf("RLIMIT_NPROC of the cells: %q and %q, want %s (MaxProcesses and the cell's init)", a.maxProcSoft, b.maxProcSoft, want)
	}
	wake()
	wg.Wait()
	for i, res := range results {
		if res == nil {
			continue
		}
		if !res.Success || res.Stdout != "uid 1000 1000\n" {
			t.Errorf("run %d: success=%v stdout=%q stderr=%q error=%+v", i, res.Success, res.Stdout, res.Stderr, res.Error)
		}
	}
}

// forkedByZygote reports whether pid is the code of a zygote's cell: its
// parent, the cell's init, is a fork of the zygote, a Python process (a
// whole sandbox's code has the jail's init, codecage-init, as parent).
func forkedByZygote(t *testing.T, pid int) bool {
	t.Helper()
	field := func(pid int, key string) string {
		b, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, key+":"); ok {
				return strings.TrimSpace(v)
			}
		}
		return ""
	}
	ppid, _ := strconv.Atoi(field(pid, "PPid"))
	grand, _ := strconv.Atoi(field(ppid, "PPid"))
	return ppid > 0 && field(ppid, "Name") == "python3" && field(grand, "Name") == "python3"
}
