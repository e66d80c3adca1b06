package httpapi_test

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/codecage/codecage/internal/config"
	"github.com/codecage/codecage/internal/leftovers"
)

// TestSoak: 2,000 executions from 16 concurrent clients leave the server's
// goroutines, descriptors, heap and cgroups where they were.
func TestSoak(t *testing.T) {
	ts := startServer(t, "", func(c *config.Config) { c.RateLimit = 0; c.KeyConcurrency = 16 })
	run := func(n, clients int) int64 {
		var failed atomic.Int64
		var next atomic.Int64
		var wg sync.WaitGroup
		for c := range clients {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for next.Add(1) <= int64(n) {
					var r result
					code := fmt.Sprintf("print(%d)", c)
					resp := ts.call(t, "POST", "/execute", "", map[string]any{"code": code}, &r)
					if resp.StatusCode != 200 || !r.Success || r.Stdout != fmt.Sprintf("%d\n", c) {
						if failed.Add(1) <= 3 {
							t.Errorf("status %d, result %+v", resp.StatusCode, r)
						}
					}
				}
			}()
		}
		wg.Wait()
		return failed.Load()
	}
	run(100, 16) // warm: pools, connections, caches
	before := measure(t, ts)
	if failed := run(2000, 16); failed > 0 {
		t.Fatalf("%d of 2000 executions failed", failed)
	}
	// What finished handlers and torn-down sandboxes leave goes in its own
	// time (a loaded host takes longer): measured until it is within the
	// bounds below, or 30 s have passed.
	after := measure(t, ts)
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); after = measure(t, ts) {
		if after.goroutines <= before.goroutines+10 && after.fds <= before.fds+10 && after.heap <= before.heap*2+16<<20 &&
			after.cgroups <= before.cgroups && after.sandboxes <= before.sandboxes {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("before %+v\nafter  %+v", before, after)
	if after.goroutines > before.goroutines+10 {
		t.Errorf("goroutines %d -> %d", before.goroutines, after.goroutines)
	}
	if after.fds > before.fds+10 {
		t.Errorf("descriptors %d -> %d", before.fds, after.fds)
	}
	if after.heap > before.heap*2+16<<20 {
		t.Errorf("heap %d -> %d", before.heap, after.heap)
	}
	if after.cgroups > before.cgroups {
		t.Errorf("cgroups %d -> %d", before.cgroups, after.cgroups)
	}
	if after.sandboxes > before.sandboxes {
		t.Errorf("sandbox processes %d -> %d", before.sandboxes, after.sandboxes)
	}
}

type usage struct {
	goroutines, fds, cgroups, sandboxes int
	heap                                uint64
}

// measure waits for the pools to settle (refills done, idle connections
// closed) and takes the process's measures.
func measure(t *testing.T, ts *testServer) usage {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		settled := true
		for class, st := range ts.svc.PoolStats() {
			full := 2 // startServer's pool size
			if strings.HasPrefix(class, "session/") {
				full = 1 // spare sessions
			}
			if st.Creating > 0 || st.InUse > 0 || st.Ready < full {
				settled = false
			}
		}
		if settled || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	fds, _ := os.ReadDir("/proc/self/fd")
	return usage{goroutines: runtime.NumGoroutine(), fds: len(fds), heap: ms.HeapAlloc,
		cgroups: len(leftovers.Cgroups(os.Getpid())), sandboxes: countSandboxProcesses()}
}

// countSandboxProcesses counts this process's descendants.
func countSandboxProcesses() int {
	me := fmt.Sprint(os.Getpid())
	parents := map[string]string{}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		s := string(b)
		if i := strings.LastIndexByte(s, ')'); i > 0 {
			if f := strings.Fields(s[i+1:]); len(f) > 1 {
				parents[e.Name()] = f[1]
			}
		}
	}
	n := 0
	for pid := range parents {
		for p := parents[pid]; p != "" && p != "0"; p = parents[p] {
			if p == me {
				n++
				break
			}
		}
	}
	return n
}
