package session

import (
	"log/slog"
	"sync"
	"time"

	"github.com/codecage/codecage/internal/fleet"
)

// sessionCPU gives a session's sandbox its full CPU bandwidth
// (SANDBOX_CPU_LIMIT) while a request runs in the session (code, a
// command) and only the idle allowance (SANDBOX_SESSION_IDLE_CPU)
// otherwise: what the code left running between requests (a daemon
// thread, a server) lives on, throttled, and what it spent is measured.
// A session starts with its full bandwidth: until its first request ends
// nothing but the harness has run in it, and the harness's boot should not
// crawl.
type sessionCPU struct {
	mu     sync.Mutex    // protects the fields below; a leaf lock (see Session)
	active int           // requests running in the session
	idle   bool          // the sandbox has the idle allowance since mark
	mark   time.Duration // the sandbox's CPU usage when the last request ended
}

// begin marks the start of a request in the session: the sandbox gets its
// full bandwidth back. It returns the CPU time the sandbox spent since the
// last request ended (0 when another request runs, or none has ended).
func (c *sessionCPU) begin(lease *fleet.Lease, cores float64, log *slog.Logger) time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.active++
	if c.active > 1 || !c.idle || lease == nil {
		return 0
	}
	c.idle = false
	spent := max(lease.CPUUsage()-c.mark, 0)
	if err := lease.SetCPU(cores); err != nil && alive(lease) {
		// The request runs on the idle allowance: slow, not unbounded.
		log.Warn("session: cannot restore the CPU limit", "sandbox", lease.ID(), "err", err)
	}
	return spent
}

// end marks the end of a request; the last one running lowers the sandbox
// to the idle allowance.
func (c *sessionCPU) end(lease *fleet.Lease, idleCores float64, log *slog.Logger) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.active--
	if c.active > 0 || lease == nil || !alive(lease) {
		return
	}
	if err := lease.SetCPU(idleCores); err != nil {
		if alive(lease) {
			log.Warn("session: cannot lower the CPU limit to the idle allowance", "sandbox", lease.ID(), "err", err)
		}
		return
	}
	c.idle, c.mark = true, lease.CPUUsage()
}

// settle is for a sandbox about to end or be replaced: it returns the CPU
// time spent since the last request ended that no result reported, and
// forgets the mark (a new sandbox starts with its full bandwidth).
func (c *sessionCPU) settle(lease *fleet.Lease) time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.idle || lease == nil {
		return 0
	}
	c.idle = false
	if !alive(lease) {
		return 0 // its cgroup is gone with it
	}
	return max(lease.CPUUsage()-c.mark, 0)
}

func alive(l *fleet.Lease) bool {
	select {
	case <-l.Done():
		return false
	default:
		return true
	}
}
