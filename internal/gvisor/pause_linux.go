package gvisor

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/codecage/codecage/internal/jail"
)

// Pausing a gVisor sandbox is runsc's own: `runsc pause` stops every task
// of gVisor's kernel where it stands, its memory kept, and `runsc resume`
// lets them run on. The Sentry stays consistent (a checkpoint of a paused
// sandbox works, which a host freeze of the Sentry would hang), and a Kill
// still works: it signals runsc's host processes, which were never frozen.

// runscCallTimeout bounds one pause or resume (a few tens of milliseconds).
const runscCallTimeout = 30 * time.Second

// Pause stops the sandbox's tasks, its memory kept: it runs nothing until
// [Sandbox.Resume]. Meanwhile its wall-clock timeout does not count down
// and its CPU budget is not checked (see [jail.Enforcer.Pause]); Kill
// still ends it. Pausing a paused sandbox changes nothing; pausing one
// that has ended, or is being killed, fails with [jail.ErrEnded].
func (s *Sandbox) Pause() error {
	return s.pausing.Pause(s.pausable, s.runscPause, s.enforcer)
}

// runscPause pauses the sandbox with runsc.
func (s *Sandbox) runscPause() error {
	if err := s.runscCall("pause"); err != nil {
		return s.pauseErr(err)
	}
	if s.killed.Load() {
		return fmt.Errorf("%w: killed while pausing", jail.ErrEnded)
	}
	return nil
}

// Resume lets a paused sandbox run on from where it stood: its timeout
// counts down again with what it had left when paused. Resuming a running
// sandbox changes nothing; resuming one that has ended fails with
// [jail.ErrEnded].
func (s *Sandbox) Resume() error {
	return s.pausing.Resume(s.pausable, s.runscResume, s.enforcer)
}

// runscResume resumes the sandbox with runsc.
func (s *Sandbox) runscResume() error {
	if err := s.runscCall("resume"); err != nil {
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
		return jail.ErrEnded
	default:
	}
	if s.killed.Load() {
		return fmt.Errorf("%w: it is being killed", jail.ErrEnded)
	}
	return nil
}

// pauseErr is a failed runsc call, as the caller sees it: a sandbox that
// ended meanwhile has ended.
func (s *Sandbox) pauseErr(err error) error {
	select {
	case <-s.done:
		return jail.ErrEnded
	default:
	}
	if s.killed.Load() {
		return fmt.Errorf("%w: %v", jail.ErrEnded, err)
	}
	return err
}

// runscCall runs `runsc verb ID` on the sandbox's state.
func (s *Sandbox) runscCall(verb string) error { return s.runscArgs(verb, s.id) }

// runscArgs runs runsc with args (a subcommand and its own) on the
// sandbox's state.
func (s *Sandbox) runscArgs(args ...string) error {
	verb := args[0]
	ctx, cancel := context.WithTimeout(context.Background(), runscCallTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, s.runsc, append([]string{"--root=" + s.stateRoot()}, args...)...)
	cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin"}
	out, err := cmd.CombinedOutput()
	if err != nil {
		out = bytes.TrimSpace(out)
		if len(out) > 500 { // runsc's words, not the sandbox's; bounded anyway
			out = out[len(out)-500:]
		}
		return fmt.Errorf("gvisor: runsc %s: %v: %s", verb, err, out)
	}
	return nil
}

// stateRoot is runsc's state directory for the sandbox.
func (s *Sandbox) stateRoot() string { return filepath.Join(s.dir, "state") }
