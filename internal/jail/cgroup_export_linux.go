package jail

import (
	"fmt"
	"path/filepath"
	"time"
)

// Cgroup is a sandbox cgroup for a backend that starts its own host
// processes (gVisor's runsc): it bounds their memory and tasks, measures
// their CPU, and can kill every one of them.
type Cgroup struct {
	cg *cgroup
}

// NewCgroup creates a cgroup named after id limited to memory bytes, tasks
// host tasks and cores of CPU bandwidth (0: the default). It fails when
// this host offers no usable cgroups.
func NewCgroup(id string, memory int64, tasks int, cores float64) (*Cgroup, error) {
	host := probeCgroups()
	if host.version == 0 {
		return nil, fmt.Errorf("%w: no cgroups (%s)", ErrUnsupported, host.reason)
	}
	if !validID(id) {
		return nil, fmt.Errorf("jail: invalid cgroup id %q", id)
	}
	// newCgroup adds the init's headroom to the task limit.
	lim := Limits{MemoryBytes: memory, MaxProcesses: max(tasks-initHeadroom, 1), CPUCores: cores}.WithDefaults()
	cg, err := newCgroup(host, id, lim, false)
	if err != nil {
		return nil, err
	}
	return &Cgroup{cg: cg}, nil
}

// ProcsFiles are the cgroup.procs files a process writes "0" to in order to
// join the cgroup (one per v1 hierarchy).
func (c *Cgroup) ProcsFiles() []string {
	var files []string
	for _, dir := range c.cg.dirs {
		files = append(files, filepath.Join(dir, "cgroup.procs"))
	}
	return files
}

// SetCPU changes the cgroup's CPU bandwidth to cores.
func (c *Cgroup) SetCPU(cores float64) error { return c.cg.setCPU(cores) }

// CPUUsage is the CPU time of every task that ever ran in the cgroup.
func (c *Cgroup) CPUUsage() time.Duration { return c.cg.cpuUsage() }

// MemoryPeak is the highest memory use the cgroup saw.
func (c *Cgroup) MemoryPeak() int64 { return c.cg.memoryPeak() }

// OOMKilled reports whether the OOM killer ended a process of the cgroup.
func (c *Cgroup) OOMKilled() bool { return c.cg.oomKills() > 0 }

// KillAll sends SIGKILL to every process in the cgroup until none is left
// (a process may fork while the list is read), or gives up after a while.
func (c *Cgroup) KillAll() error { return c.cg.kill(true) }

// Destroy removes the cgroup; KillAll must have emptied it.
func (c *Cgroup) Destroy() error { return c.cg.destroy() }
