package cli

import (
	"strings"
	"testing"
)

// Bench refuses what it cannot measure before it starts anything.
func TestBenchUsageErrors(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"bench", "--gvisor-only", "--suites-only"}, "at most one of"},
		{[]string{"bench", "--env-only", "--suites-only"}, "at most one of"},
		{[]string{"bench", "--clients", "0"}, "--clients at least 1"},
		{[]string{"bench", "extra"}, `unexpected argument "extra"`},
	} {
		code, _, errOut := cli(t, "", c.args...)
		if code != exitUsage || !strings.Contains(errOut, c.want) {
			t.Errorf("%v: exit %d, stderr %q; want %d and %q", c.args, code, errOut, exitUsage, c.want)
		}
	}
}
