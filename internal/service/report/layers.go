package report

import (
	"github.com/codecage/codecage/internal/config"
	"github.com/codecage/codecage/internal/fleet"
)

// Layers reports the isolation layers a run on backend gets. Under
// gVisor the code faces gVisor's kernel, filtered by the jail's seccomp
// rules, with no Landlock; cgroups bound gVisor's processes on the host.
func Layers(backend string) fleet.Layers {
	l := fleet.ProbeHost().Layers()
	if backend != config.IsolationGVisor {
		return l
	}
	return fleet.Layers{Cgroup: l.Cgroup, Seccomp: true, Warnings: []string{}}
}
