package jail

import "time"

// procRefresh is how often a machine's /proc figures are sent to its init
// (besides before each spawn): top's default delay is 3 s.
const procRefresh = time.Second

// machineStats reads the figures a machine's /proc shows from its cgroup.
func (cg *cgroup) machineStats() machineStats {
	st := machineStats{
		MemoryUsed: cg.readInt(cgMemory),
		CPU:        int64(cg.cpuUsage()),
		Tasks:      cg.readInt(cgPidsCurrent),
	}
	var buf [8192]byte
	b := buf[:cg.read(cgMemStat, buf[:])]
	if cg.version == 1 {
		st.Cache = keyIn(b, "cache")
	} else {
		st.Cache = keyIn(b, "file")
	}
	st.Shared = keyIn(b, "shmem")
	return st
}

// refreshProc sends the init the machine's figures now; nothing while
// the machine is paused (its init reads no order then) or without a
// cgroup (nothing to show but the limit, sent at the start).
func (s *Sandbox) refreshProc() {
	if s.machine == nil || s.cg == nil || s.Paused() {
		return
	}
	st := s.cg.machineStats()
	_ = s.machine.send(supervisorOrder{Stats: &st})
}

// refreshProcs refreshes the machine's /proc every procRefresh until the
// sandbox is gone.
func (s *Sandbox) refreshProcs() {
	if s.cg == nil {
		return
	}
	t := time.NewTicker(procRefresh)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			s.refreshProc()
		case <-s.done:
			return
		}
	}
}
