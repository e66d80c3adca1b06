package service_test

import (
	"context"
	"testing"
	"time"

	"github.com/codecage/codecage/internal/config"
	"github.com/codecage/codecage/internal/policy"
)

// A snapshot is a request in its session: the sandbox has its full CPU
// bandwidth while its state is saved, not the idle allowance (on which a
// tenth of a core made a small snapshot take 0.4 s), and the allowance
// again after. Judged from the host: the session's cgroup's bandwidth,
// read while a value of the state takes a second to pickle.
func TestSessionSnapshotRunsAtFullCPU(t *testing.T) {
	if testBackend(t) != config.IsolationNative {
		t.Skip("natively: a gVisor snapshot is runsc's checkpoint")
	}
	h := findHostCgroups(t)
	const idleCores = 0.05
	svc, _ := snapshotService(t, func(c *config.Config) {
		c.AllowedImports = []string{policy.AllImports}
		c.CPULimit, c.IdleCPU = 1, idleCores
		c.DataPoolSize, c.SessionPoolSize, c.GVisorPoolSize, c.GVisorDataPoolSize, c.GVisorSessionPoolSize = 0, 0, 0, 0, 0
		c.MachinePoolSize = 0
	})
	id := newSession(t, svc, "alice")
	mustSucceed(t, inSession(t, svc, id, "alice", "import time\nclass Slow:\n    def __reduce__(self):\n        time.sleep(1)\n        return (int, (7,))\ns = Slow()"))
	// The session is this service's only sandbox (no pools).
	var cg string
	for _, n := range h.names() {
		if q := h.quota(t, n); q >= idleCores*0.99 && q <= idleCores*1.01 {
			cg = n
		}
	}
	if cg == "" {
		t.Fatalf("no cgroup on the idle allowance between requests: %v", h.names())
	}
	done := make(chan error, 1)
	go func() {
		_, err := svc.SnapshotSession(context.Background(), id, "alice", "")
		done <- err
	}()
	most := 0.0
	for waiting := true; waiting; {
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("SnapshotSession: %v", err)
			}
			waiting = false
		case <-time.After(20 * time.Millisecond):
			most = max(most, h.quota(t, cg))
		}
	}
	if most < 0.99 {
		t.Errorf("during the snapshot the session's bandwidth was at most %g cores, want its full SANDBOX_CPU_LIMIT (1)", most)
	}
	if q := h.quota(t, cg); q < idleCores*0.99 || q > idleCores*1.01 {
		t.Errorf("after the snapshot the session's bandwidth is %g cores, want the idle allowance %g", q, idleCores)
	}
}
