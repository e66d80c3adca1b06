// Package leftovers finds what sandboxes leave on the host: processes that
// run as a sandbox uid, and the cgroups a supervisor made. Tests use it to
// show that teardown is complete.
package leftovers

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/codecage/codecage/internal/fleet"
)

// SandboxProcesses lists host processes running as a uid of a block this
// process leased (root mode gives each of its sandboxes, zygote cells
// included, one from there), as "pid name". Sandboxes of other codecage
// processes on the host are left out.
func SandboxProcesses() []string { return processesIn(fleet.LeasedUIDRanges()) }

// SandboxProcessesOf lists host processes running as a uid of a block the
// codecage process pid leased (it may have exited since), as "pid name":
// the sandboxes a server run as a child process left, and not those of
// other codecage processes the host runs at the same time.
func SandboxProcessesOf(pid int) []string { return processesIn(fleet.UIDRangesLeasedBy(pid)) }

func processesIn(ranges [][2]int) []string {
	return processes(func(uid int) bool { return inRanges(ranges, uid) })
}

// Leased says whether uid is in a block this process leased: one of its
// own sandboxes (zygote cells included) ran or runs as it. Tests that
// look for their sandboxes among the host's processes ask this, not
// whether the uid is any sandbox's, since other codecage processes (test
// packages run side by side) have sandboxes of their own.
func Leased(uid int) bool { return inRanges(fleet.LeasedUIDRanges(), uid) }

func inRanges(ranges [][2]int, uid int) bool {
	for _, r := range ranges {
		if uid >= r[0] && uid < r[1] {
			return true
		}
	}
	return false
}

// processes lists, as "pid Name:\tname", the processes with a real,
// effective, saved or filesystem uid that match.
func processes(match func(uid int) bool) []string {
	var found []string
	for _, p := range HostProcesses() {
		if slices.ContainsFunc(p.UIDs, match) {
			found = append(found, fmt.Sprintf("%d Name:\t%s", p.PID, p.Name))
		}
	}
	return found
}

// Process is a host process as its /proc/<pid>/status shows it.
type Process struct {
	PID, PPID int
	Name      string
	// UIDs are the real, effective, saved and filesystem uids.
	UIDs []int
	// Status holds every field of the file, its value trimmed.
	Status map[string]string
}

// UID is the process's real uid (-1 if unknown).
func (p Process) UID() int {
	if len(p.UIDs) == 0 {
		return -1
	}
	return p.UIDs[0]
}

// HostProcesses reads the status of every process on the host; one that
// ends meanwhile is left out.
func HostProcesses() []Process {
	var out []Process
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "status"))
		if err != nil {
			continue
		}
		p := Process{PID: pid, PPID: -1, Status: map[string]string{}}
		for _, line := range strings.Split(string(b), "\n") {
			k, v, ok := strings.Cut(line, ":")
			if !ok {
				continue
			}
			v = strings.TrimSpace(v)
			p.Status[k] = v
			switch k {
			case "Name":
				p.Name = v
			case "PPid":
				p.PPID, _ = strconv.Atoi(v)
			case "Uid":
				for _, f := range strings.Fields(v) {
					if uid, err := strconv.Atoi(f); err == nil {
						p.UIDs = append(p.UIDs, uid)
					}
				}
			}
		}
		out = append(out, p)
	}
	return out
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
