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

// SandboxProcesses lists host processes running as a uid of a block this
// process leased (root mode gives each of its sandboxes, zygote cells
// included, one from there), as "pid name". Sandboxes of other codecage
// processes on the host are left out.
func SandboxProcesses() []string {
	ranges := jail.LeasedUIDRanges()
	return processes(func(uid int) bool {
		for _, r := range ranges {
			if uid >= r[0] && uid < r[1] {
				return true
			}
		}
		return false
	})
}

// HostSandboxProcesses lists host processes running as any sandbox uid,
// whichever codecage process started them (a server run as a child
// process, say), as "pid name".
func HostSandboxProcesses() []string { return processes(jail.InUIDSpan) }

// processes lists the processes with a real, effective, saved or
// filesystem uid that match.
func processes(match func(uid int) bool) []string {
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
			f := strings.Fields(line)
			if len(f) < 2 || f[0] != "Uid:" {
				continue
			}
			for _, v := range f[1:] {
				if uid, err := strconv.Atoi(v); err == nil && match(uid) {
					found = append(found, e.Name()+" "+strings.SplitN(string(b), "\n", 2)[0])
					break
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
