package cli

import (
	"strings"
	"testing"
)

// TestRunRefusesAbsurdLimitFlags: values that would wrap around once
// converted (NaN, 1e308 seconds, 2^63 MiB) are refused naming the flag,
// before anything runs, as the configuration loader refuses them in a
// SANDBOX_* variable.
func TestRunRefusesAbsurdLimitFlags(t *testing.T) {
	for _, tc := range []struct{ flag, value, want string }{
		{"--timeout", "NaN", "want a number of seconds"},
		{"--timeout", "+Inf", "want a number of seconds"},
		{"--timeout", "1e308", "want a number of seconds"},
		{"--max-cpu-time-sec", "NaN", "want a number of seconds"},
		{"--max-cpu-time-sec", "1e308", "want a number of seconds"},
		{"--max-cpu-time-sec", "-1", "want a number of seconds"},
		{"--max-memory-mb", "9223372036854775808", "want a positive size"},
		{"--max-memory-mb", "9223372036854775807", "want a positive size"},
		{"--max-memory-mb", "NaN", "want a positive size"},
		{"--max-memory-mb", "2^63", "want a positive size"},
		{"--max-print-length", "1e300", "want a positive size"},
		{"--max-code-size", "NaN", "want a positive size"},
	} {
		code, out, errOut := cli(t, "", "run", tc.flag, tc.value, "--state-dir", t.TempDir(), "-c", "print(1)")
		name := strings.TrimLeft(tc.flag, "-")
		if code != exitUsage || out != "" || !strings.Contains(errOut, name) || !strings.Contains(errOut, tc.want) {
			t.Errorf("%s %s: exit %d, stdout %q, stderr %.300q (want exit %d naming %s: %s)", tc.flag, tc.value, code, out, errOut, exitUsage, name, tc.want)
		}
		for _, wrapped := range []string{"-2562047h", "-1048576", "bytes is out of range"} {
			if strings.Contains(errOut, wrapped) {
				t.Errorf("%s %s: wrapped value in the message: %.300q", tc.flag, tc.value, errOut)
			}
		}
	}
	// Sane values still run, the MiB flag taking a bare number or a unit.
	for _, args := range [][]string{{"--max-memory-mb", "64"}, {"--max-memory-mb", "1g"}, {"--max-cpu-time-sec", "2.5"}, {"--timeout", "5"}} {
		code, out, errOut := cli(t, "", append([]string{"run", "--state-dir", t.TempDir(), "-c", "print(7)"}, args...)...)
		if code != 0 || out != "7\n" {
			t.Errorf("%v: exit %d %q %q", args, code, out, errOut)
		}
	}
}
