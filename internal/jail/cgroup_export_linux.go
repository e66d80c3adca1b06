package jail

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Cgroup is a sandbox cgroup for a backend that starts its own host
// processes (gVisor's runsc): it bounds their memory and tasks, measures
// their CPU, and can kill every one of them.
type Cgroup struct {
	cg *cgroup
}

// NewCgroup creates a cgroup named after id limited to memory bytes and
// tasks host tasks. It fails when this host offers no usable cgroups.
func NewCgroup(id string, memory int64, tasks int) (*Cgroup, error) {
	host := probeCgroups()
	if host.version == 0 {
		return nil, fmt.Errorf("%w: no cgroups (%s)", ErrUnsupported, host.reason)
	}
	if !validID(id) {
		return nil, fmt.Errorf("jail: invalid cgroup id %q", id)
	}
	// newCgroup adds the init's headroom to the task limit.
	cg, err := newCgroup(host, id, Limits{MemoryBytes: memory, MaxProcesses: max(tasks-initHeadroom, 1)})
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

// CPUUsage is the CPU time of every task that ever ran in the cgroup.
func (c *Cgroup) CPUUsage() time.Duration { return c.cg.cpuUsage() }

// MemoryPeak is the highest memory use the cgroup saw.
func (c *Cgroup) MemoryPeak() int64 { return c.cg.memoryPeak() }

// OOMKilled reports whether the OOM killer ended a process of the cgroup.
func (c *Cgroup) OOMKilled() bool { return c.cg.oomKills() > 0 }

// KillAll sends SIGKILL to every process in the cgroup until none is left
// (a process may fork while the list is read), or gives up after a while.
func (c *Cgroup) KillAll() error {
	procs := c.ProcsFiles()
	if len(procs) == 0 {
		return nil
	}
	// Every hierarchy holds the same processes; the first one will do.
	list := procs[0]
	for i := 0; i < 400; i++ {
		b, err := os.ReadFile(list)
		if err != nil {
			return fmt.Errorf("jail: read %s: %w", list, err)
		}
		pids := strings.Fields(string(b))
		if len(pids) == 0 {
			return nil
		}
		for _, p := range pids {
			if pid, err := strconv.Atoi(p); err == nil {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
	return errors.New("jail: processes of the cgroup survive SIGKILL")
}

// Destroy removes the cgroup; KillAll must have emptied it.
func (c *Cgroup) Destroy() error { return c.cg.destroy() }
