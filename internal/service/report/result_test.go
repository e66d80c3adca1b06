package report

import (
	"encoding/json"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/codecage/codecage/internal/fleet"
	"github.com/codecage/codecage/internal/jail"
	"github.com/codecage/codecage/internal/runtime"
)

// A run's outcome becomes its result with no sandbox: the limit that
// ended it, its error, and what a reply or an exit alone says.
func TestBuildResult(t *testing.T) {
	lim := jail.Limits{Timeout: 3 * time.Second, CPUTime: 2 * time.Second, MemoryBytes: 64 << 20, OutputBytes: 100}
	line := 3
	cases := []struct {
		name    string
		o       fleet.Outcome
		success bool
		errType string
		limit   string
	}{
		{"value", fleet.Outcome{Reply: &runtime.Reply{Result: json.RawMessage("42")}, Stdout: "hi\n"}, true, "", ""},
		{"exception", fleet.Outcome{Reply: &runtime.Reply{Error: &runtime.Error{Type: "ZeroDivisionError", Message: "division by zero", Line: &line}}}, false, "ZeroDivisionError", ""},
		{"timeout", fleet.Outcome{Exit: jail.Exit{Limit: jail.LimitTimeout, ExitCode: -1, Signal: 9}}, false, "TimeoutError", "timeout"},
		{"cpu", fleet.Outcome{Exit: jail.Exit{Limit: jail.LimitCPU, ExitCode: -1, Signal: 9}}, false, "CPUTimeLimitExceeded", "cpu_time"},
		{"output", fleet.Outcome{Exit: jail.Exit{Limit: jail.LimitOutput, Truncated: true}}, false, "OutputLimitExceeded", "output"},
		{"canceled", fleet.Outcome{Exit: jail.Exit{Limit: jail.LimitCanceled}}, false, "Canceled", "canceled"},
		{"MemoryError without a memory cgroup", fleet.Outcome{Reply: &runtime.Reply{Error: &runtime.Error{Type: "MemoryError"}}}, false, "MemoryError", "memory"},
		{"killed by a signal", fleet.Outcome{Exit: jail.Exit{ExitCode: -1, Signal: int(syscall.SIGSEGV)}}, false, "Crash", ""},
		{"exited early", fleet.Outcome{Exit: jail.Exit{ExitCode: 3}}, false, "Exit", ""},
		{"os._exit(0)", fleet.Outcome{Exit: jail.Exit{}}, true, "", ""},
		{"sys.exit(2)", fleet.Outcome{Reply: &runtime.Reply{ExitCode: 2}}, false, "", ""},
	}
	for _, c := range cases {
		r := Build("id", "native", c.o, lim, fleet.Layers{})
		gotType := ""
		if r.Error != nil {
			gotType = r.Error.Type
		}
		gotLimit := ""
		if r.Limit != nil {
			gotLimit = *r.Limit
		}
		if r.Success != c.success || gotType != c.errType || gotLimit != c.limit || r.ExecutionID != "id" || r.Stdout != c.o.Stdout {
			t.Errorf("%s: success %v error %q limit %q, want %v %q %q (%+v)", c.name, r.Success, gotType, gotLimit, c.success, c.errType, c.limit, r)
		}
	}
	r := Build("id", "native", fleet.Outcome{Exit: jail.Exit{Limit: jail.LimitTimeout}}, lim, fleet.Layers{})
	if !r.TimedOut || !strings.Contains(r.Error.Message, "3s") {
		t.Fatalf("timeout result: %+v %+v", r, r.Error)
	}
	if r := Build("id", "native", fleet.Outcome{}, lim, fleet.Layers{}); string(r.Result) != "null" || r.Variables == nil {
		t.Fatalf("empty result: %+v", r)
	}
}
