package jail

import (
	"errors"
	"fmt"

	"golang.org/x/sys/unix"
)

// Pause freezes every process of the sandbox where it stands (its cgroup's
// freezer), its memory kept: it runs nothing and uses no CPU until
// [Sandbox.Resume]. Meanwhile its wall-clock timeout does not count down
// and its CPU budget is not checked (see [Enforcer.Pause]); Kill still
// ends it. Pausing a paused sandbox changes nothing. It fails with
// [ErrEnded] once the sandbox is ended or being killed, and with
// [ErrUnsupported] where the host has no freezer (no cgroups, rootless
// without delegation, v1 without the freezer hierarchy).
func (s *Sandbox) Pause() error {
	return s.pausing.Pause(s.pausable, s.freeze, s.enforcer)
}

// freeze freezes the sandbox's cgroup, or where it has no freezer, stops
// its processes (sigstop_linux.go).
func (s *Sandbox) freeze() error {
	if !s.freezable() {
		return s.stopProcesses()
	}
	if err := s.cg.freeze(); err != nil {
		return s.pauseErr(err)
	}
	// A Kill that came meanwhile may have thawed before the freeze: thaw
	// what it killed (Kill thaws anything frozen before its end).
	if s.killed.Load() {
		_ = s.cg.thaw()
		return fmt.Errorf("%w: killed while pausing", ErrEnded)
	}
	return nil
}

// Resume lets a paused sandbox run on from where it stood: its timeout
// counts down again with what it had left when paused. Resuming a running
// sandbox changes nothing; resuming one that has ended fails with
// [ErrEnded].
func (s *Sandbox) Resume() error {
	return s.pausing.Resume(s.pausable, s.thaw, s.enforcer)
}

// thaw thaws the sandbox's cgroup, or continues its processes.
func (s *Sandbox) thaw() error {
	if !s.freezable() {
		return s.continueProcesses()
	}
	if err := s.cg.thaw(); err != nil {
		return s.pauseErr(err)
	}
	return nil
}

// Paused reports whether the sandbox is paused.
func (s *Sandbox) Paused() bool { return s.pausing.Paused() }

// pausable says why the sandbox cannot be paused or resumed now, if so.
func (s *Sandbox) pausable() error {
	select {
	case <-s.done:
		return ErrEnded
	default:
	}
	if s.killed.Load() {
		return fmt.Errorf("%w: it is being killed", ErrEnded)
	}
	return nil
}

// freezable reports whether the sandbox's cgroup has a freezer.
func (s *Sandbox) freezable() bool { return s.cg != nil && s.cg.canFreeze() }

// stopProcesses stops every process of the sandbox's pid namespace.
func (s *Sandbox) stopProcesses() error {
	ns, err := pidNSOf(s.cmd.Process.Pid)
	if err != nil {
		return s.pauseErr(err)
	}
	if _, err := signalPidNS(ns, unix.SIGSTOP); err != nil {
		_, _ = signalPidNS(ns, unix.SIGCONT)
		return s.pauseErr(err)
	}
	// A Kill meanwhile ends them all anyway (SIGKILL ends a stopped
	// process); say so.
	if s.killed.Load() {
		return fmt.Errorf("%w: killed while pausing", ErrEnded)
	}
	return nil
}

// continueProcesses continues every process of the sandbox's pid namespace.
func (s *Sandbox) continueProcesses() error {
	ns, err := pidNSOf(s.cmd.Process.Pid)
	if err != nil {
		return s.pauseErr(err)
	}
	if _, err := signalPidNS(ns, unix.SIGCONT); err != nil {
		return s.pauseErr(err)
	}
	return nil
}

// pauseErr is a failed freeze or thaw, as the caller sees it: a cgroup
// that is gone (or being torn down) is a sandbox that has ended.
func (s *Sandbox) pauseErr(err error) error {
	select {
	case <-s.done:
		return ErrEnded
	default:
	}
	if s.killed.Load() || errors.Is(err, unix.EBADF) || errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("%w: %v", ErrEnded, err)
	}
	return fmt.Errorf("jail: %w", err)
}
