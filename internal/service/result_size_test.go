package service_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/codecage/codecage/internal/service"
)

// A final value far past the result limit comes back cut, as a success,
// and costs the run little beyond the value itself: judged by the peak
// memory and the CPU time the run's cgroup reports, against the same run
// whose last line shows nothing. (The encoder once built a list of one
// entry per character first: a 50 MiB string was OOM-killed at 512 MiB,
// and took 540 MB and 5.5 s of CPU at 1 GiB.)
func TestHugeResultIsTruncatedNotKilled(t *testing.T) {
	svc := newService(t)
	opts := []func(*service.Request){withMemory(512 << 20), withTimeout(60 * time.Second)}
	const str, bytes, ints = "x = 'y' * (50 << 20)\n", "x = b'y' * (50 << 20)\n", "x = list(range(4 << 20))\n"
	bases := map[string]*service.Result{}
	for _, setup := range []string{str, bytes, ints} {
		bases[setup] = run(t, svc, setup+"None", opts...)
		mustSucceed(t, bases[setup])
	}
	for _, c := range []struct {
		name, setup, expr, prefix string
		display                   bool
	}{
		{"str", str, "x", "'yyyy", false},
		{"list", str, "[1, x]", "[1, 'yyyy", false},
		{"dict", str, "{'k': x}", "{'k': 'yyyy", false},
		{"bytes", bytes, "x", "b'yyyy", false},
		{"ints", ints, "x", "[0, 1, 2, 3", false},
		{"display", str, "x", "'yyyy", true},
	} {
		t.Run(c.name, func(t *testing.T) {
			o := append([]func(*service.Request){}, opts...)
			if c.display {
				o = append(o, func(r *service.Request) { r.Display = true })
			}
			res := run(t, svc, c.setup+c.expr, o...)
			mustSucceed(t, res)
			var text string
			if err := json.Unmarshal(res.Result, &text); err != nil {
				t.Fatalf("result %.200s is not a string: %v", res.Result, err)
			}
			if !strings.HasPrefix(text, c.prefix) || !strings.HasSuffix(text, "... [truncated]") || len(text) > service.MaxResultBytes+100 {
				t.Fatalf("result of %d bytes, %.40q...%q: want it cut at %d bytes", len(text), text, text[max(0, len(text)-40):], service.MaxResultBytes)
			}
			if c.display {
				plain := res.Display["text/plain"]
				if !strings.HasPrefix(plain, c.prefix) || !strings.HasSuffix(plain, "... [truncated]") || len(plain) > service.MaxResultBytes+100 {
					t.Fatalf("display text/plain of %d bytes: want it cut at %d", len(plain), service.MaxResultBytes)
				}
			}
			base := bases[c.setup]
			extraMem := res.Resources.PeakMemoryBytes - base.Resources.PeakMemoryBytes
			extraCPU := res.Resources.CPUTimeSeconds - base.Resources.CPUTimeSeconds
			t.Logf("peak %d MiB (%+d MiB over the run without a result), CPU %.2fs (%+.2fs)",
				res.Resources.PeakMemoryBytes>>20, extraMem>>20, res.Resources.CPUTimeSeconds, extraCPU)
			if extraMem > 16<<20 {
				t.Errorf("the result cost %d MiB of memory past the value's own (peak %d MiB, %d MiB without it)",
					extraMem>>20, res.Resources.PeakMemoryBytes>>20, base.Resources.PeakMemoryBytes>>20)
			}
			if extraCPU > 1 {
				t.Errorf("the result cost %.2fs of CPU (%.2fs in all, %.2fs without it)", extraCPU, res.Resources.CPUTimeSeconds, base.Resources.CPUTimeSeconds)
			}
		})
	}
}
