package report

import (
	"regexp"
	"strings"
	"sync"

	"github.com/codecage/codecage/internal/bounded"
	"github.com/codecage/codecage/internal/service/event"
)

var deniedImport = regexp.MustCompile(`^Import of '([^']+)' is not allowed`)

// SecurityEvents lists what the run tried that the policy refused: imports
// the code let fail, destinations the egress proxy refused (the first
// event.MaxRefusedPerRun, then how many more), and a kill by the seccomp filter.
func SecurityEvents(r *Result, refused *Refusals) []string {
	var out []string
	if r.Error != nil && r.Error.Type == "ImportError" {
		if m := deniedImport.FindStringSubmatch(r.Error.Message); m != nil {
			out = append(out, "import_denied:"+bounded.String(m[1], event.MaxName))
		}
	}
	hosts, more := refused.List()
	for _, host := range hosts {
		out = append(out, "egress_denied:"+host)
	}
	if more != "" {
		out = append(out, "egress_denied:"+more)
	}
	if r.Error != nil && r.Error.Type == "Crash" && strings.Contains(r.Error.Message, "(bad system call)") {
		out = append(out, "seccomp_kill")
	}
	return out
}

// Refusals collects the egress proxy's refusals during one run: the first
// event.MaxRefusedPerRun hosts, and how many more. Safe for concurrent use.
type Refusals struct {
	quota *bounded.Quota
	mu    sync.Mutex
	hosts []string
}

// NewRefusals is an empty collection.
func NewRefusals() *Refusals { return &Refusals{quota: bounded.NewQuota(event.MaxRefusedPerRun)} }

// Add records a refused host (the proxy's callback).
func (r *Refusals) Add(host string) {
	if !r.quota.Take() {
		return
	}
	r.mu.Lock()
	r.hosts = append(r.hosts, host)
	r.mu.Unlock()
}

// List returns the hosts kept and a summary of the rest ("" when none).
func (r *Refusals) List() (hosts []string, more string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.hosts...), r.quota.Summary("refused")
}
