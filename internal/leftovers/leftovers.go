// Package leftovers finds what sandboxes leave on the host: processes that
// run as a sandbox uid, and the cgroups a supervisor made. Tests use it to
// show that teardown is complete.
package leftovers

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/codecage/codecage/internal/jail"
)

// SandboxProcesses lists host processes running as a sandbox uid (root
// mode gives each sandbox one from jail.HostUIDBase on), as "pid name".
func SandboxProcesses() []string {
	var found []string
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "status"))
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			if f := strings.Fields(line); len(f) > 1 && f[0] == "Uid:" {
				uid, _ := strconv.Atoi(f[1])
				if uid >= jail.HostUIDBase && uid < jail.HostUIDBase+jail.HostUIDCount {
					found = append(found, e.Name()+" "+strings.SplitN(string(b), "\n", 2)[0])
				}
			}
		}
	}
	return found
}

// Cgroups lists the sandbox cgroups of the supervisor with this pid: the
// jail names them "<pid>-<sandbox id>", under any controller.
func Cgroups(supervisor int) []string {
	prefix := fmt.Sprintf("%d-", supervisor)
	var found []string
	var walk func(dir string, depth int)
	walk = func(dir string, depth int) {
		if depth > 8 {
			return
		}
		ents, _ := os.ReadDir(dir)
		for _, e := range ents {
			if !e.IsDir() {
				continue
			}
			p := filepath.Join(dir, e.Name())
			if strings.HasPrefix(e.Name(), prefix) {
				found = append(found, p)
				continue
			}
			walk(p, depth+1)
		}
	}
	walk("/sys/fs/cgroup", 0)
	return found
}
