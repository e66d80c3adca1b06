// Package hostproc reads, on the host, what a sandbox's processes see of
// /proc: tests judge a machine's proc from outside it with it.
package hostproc

import (
	"os"
	"strconv"
	"strings"
)

// Uncovered lists the host-wide entries of /proc (not a pid, self,
// thread-self or a link) that no mount covers in host process pid's
// mount namespace, read from its mountinfo on the host.
func Uncovered(pid int) ([]string, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/mountinfo")
	if err != nil {
		return nil, err
	}
	covered := map[string]bool{}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) > 4 {
			if name, ok := strings.CutPrefix(f[4], "/proc/"); ok {
				covered[name] = true
			}
		}
	}
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range entries {
		name := e.Name()
		if _, err := strconv.Atoi(name); err == nil || name == "self" || name == "thread-self" || e.Type()&os.ModeSymlink != 0 {
			continue
		}
		if !covered[name] {
			out = append(out, name)
		}
	}
	return out, nil
}
