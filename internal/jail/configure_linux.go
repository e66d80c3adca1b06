package jail

// The supervisor's side of an init's start: the configuration it is
// sent, and the reports it answers until its program runs.

import (
	"encoding/json"
	"fmt"

	"golang.org/x/sys/unix"
)

// configure places the init in its cgroup, sends the config, and waits for
// the program to start.
func (s *Sandbox) configure(fds *sandboxFiles) error {
	if s.cg != nil && s.cg.version == 1 {
		if err := s.cg.addProcess(s.cmd.Process.Pid); err != nil {
			return err
		}
	}
	cfg := s.initConfigOf(fds)
	var usr []int
	if tree := s.sendsUsrTree(&cfg); tree != nil {
		defer tree.Close()
		usr = []int{int(tree.Fd())}
		if status := openHostPkgStatus(); status != nil { // pkgskeleton_linux.go
			defer status.Close()
			usr = append(usr, int(status.Fd()))
			cfg.PkgStatus = true
		}
	}
	if err := sendWithFDs(fds.control, &cfg, usr...); err != nil {
		return fmt.Errorf("%w: send config: %v", ErrSetup, err)
	}
	// The init passes a terminal's master with its start report.
	rights := newRightsReader(fds.control)
	fds.controlDec, fds.controlRights = json.NewDecoder(rights), rights
	for {
		var rep initReport
		if err := fds.controlDec.Decode(&rep); err != nil {
			return fmt.Errorf("%w: init ended before the program started: %v", ErrSetup, err)
		}
		switch {
		case rep.Error != "":
			return fmt.Errorf("%w: %s", ErrSetup, rep.Error)
		case rep.Started != 0:
			fd := rights.take()
			if s.spec.Terminal == nil {
				if fd >= 0 {
					_ = unix.Close(fd)
				}
				return nil
			}
			if fd < 0 {
				return fmt.Errorf("%w: the init sent no terminal", ErrSetup)
			}
			in, err := newTerminal(fd)
			if err != nil {
				_ = unix.Close(fd)
				return err
			}
			s.input = in
			return nil
		case rep.Forking:
			program := s.spec.Limits.MaxProcesses
			if s.spec.Machine {
				// Room the machine's processes cannot take (their
				// RLIMIT_NPROC stops them first): its init's threads,
				// which it may need any time it serves them.
				program += MachineThreads
			}
			if err := s.cg.settlePids(program); err != nil {
				return fmt.Errorf("%w: %v", ErrSetup, err)
			}
			if err := json.NewEncoder(fds.control).Encode(supervisorReply{Fork: true}); err != nil {
				return fmt.Errorf("%w: %v", ErrSetup, err)
			}
		}
	}
}

// initConfigOf is the init's configuration for this sandbox, with the
// descriptors of fds it is given.
func (s *Sandbox) initConfigOf(fds *sandboxFiles) initConfig {
	return initConfig{
		Argv:            s.spec.Argv,
		Env:             s.spec.Env,
		Hostname:        "sandbox",
		Home:            HomeOf(s.spec.Home),
		HasWorkspace:    fds.workspace != nil,
		WorkspacePath:   fds.workspacePath,
		ReadOnlyBinds:   s.spec.ReadOnlyBinds,
		Programs:        s.spec.Programs,
		HasRoot:         fds.root != nil,
		RootEntries:     rootEntriesOf(fds.root),
		RootPath:        rootPathOf(fds.root),
		Binds:           mountedBinds(s.spec),
		BindMounts:      bindMounts(fds.binds),
		SharedTmp:       s.spec.Tmp != "",
		TmpBytes:        s.spec.Limits.TmpBytes,
		WorkspaceBytes:  s.spec.Limits.WorkspaceBytes,
		Rlimits:         programRlimits(s.spec.Limits, s.cg != nil),
		LandlockABI:     s.host.LandlockABI,
		CgroupNS:        s.cg != nil,
		SettlePids:      s.cg != nil,
		Nested:          s.spec.Nested,
		CellUIDs:        s.cellUIDs(),
		ForwardPort:     forwardPort(s.spec.Forward),
		Stdin:           s.spec.Stdin,
		NoChannel:       s.spec.NoChannel,
		Terminal:        s.spec.Terminal,
		LoopbackServers: s.spec.LoopbackServers,
		JoinedNet:       s.spec.NetNS != nil,
		Machine:         s.spec.Machine,
		MachineRootFD:   fds.machineRootFD,
		MachineRootPath: fds.machineRootPath,
		MachineMemory:   s.spec.Limits.MemoryBytes,
		Links:           s.spec.Links,
		RootInside:      s.rootInside(),
	}
}
