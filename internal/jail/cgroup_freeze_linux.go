package jail

import (
	"bytes"
	"errors"
	"fmt"
	"time"
)

// Freezing a cgroup stops every task in it where it stands, its memory
// kept, until it is thawed: a pause with no copy. v1 has a freezer
// hierarchy (freezer.state: FROZEN or THAWED, FREEZING until every task
// has stopped); v2 has cgroup.freeze in every cgroup, and cgroup.events
// says "frozen 1" once every task has stopped.

// freezeWait bounds how long the tasks may take to stop: well under a
// millisecond, unless one sleeps uninterruptibly in the kernel or the
// host is overloaded (a 2-core PVM guest with two busy loops beside the
// test suite took over 2 s, and a pause then failed).
const freezeWait = 15 * time.Second

// errNoFreezer means the cgroup cannot be frozen: on v1, it is not in a
// freezer hierarchy.
var errNoFreezer = errors.New("the sandbox's cgroup has no freezer")

// canFreeze reports whether the cgroup can be frozen.
func (cg *cgroup) canFreeze() bool {
	if cg.version == 1 {
		_, ok := cg.dirs["freezer"]
		return ok
	}
	_, ok := cg.dirs[""]
	return ok
}

// freeze stops every task of the cgroup and returns once all have
// stopped. Freezing a frozen cgroup changes nothing. If the tasks do not
// all stop within freezeWait, the cgroup is thawed and freeze fails.
func (cg *cgroup) freeze() error {
	if !cg.canFreeze() {
		return errNoFreezer
	}
	// Before the write: a kill from now on thaws what it killed.
	cg.frozen.Store(true)
	state := "FROZEN"
	if cg.version == 2 {
		state = "1"
	}
	if err := cg.write(cgFreeze, state); err != nil {
		cg.frozen.Store(false)
		return fmt.Errorf("cgroup freeze: %w", err)
	}
	deadline := time.Now().Add(freezeWait)
	// Tasks stop on their next way back to user space, which an IPI
	// forces: the first look comes soon, later ones less often.
	for d := 20 * time.Microsecond; ; d = min(2*d, 2*time.Millisecond) {
		done, err := cg.isFrozen()
		if err != nil || done {
			return err
		}
		if time.Now().After(deadline) {
			_ = cg.thaw()
			return fmt.Errorf("cgroup freeze: tasks still running after %v", freezeWait)
		}
		time.Sleep(d)
	}
}

// isFrozen reports whether every task of the cgroup has stopped. On v1,
// reading freezer.state is also what moves FREEZING to FROZEN.
func (cg *cgroup) isFrozen() (bool, error) {
	if cg.version == 2 {
		var buf [256]byte
		n := cg.read(cgEvents, buf[:])
		if n == 0 {
			return false, errors.New("cgroup freeze: cgroup.events unreadable")
		}
		return bytes.Contains(buf[:n], []byte("frozen 1")), nil
	}
	var buf [16]byte
	n := cg.read(cgFreeze, buf[:])
	if n == 0 {
		return false, errors.New("cgroup freeze: freezer.state unreadable")
	}
	return string(bytes.TrimSpace(buf[:n])) == "FROZEN", nil
}

// thaw lets the cgroup's tasks run again; thawing a running cgroup
// changes nothing.
func (cg *cgroup) thaw() error {
	if !cg.canFreeze() {
		return errNoFreezer
	}
	state := "THAWED"
	if cg.version == 2 {
		state = "0"
	}
	if err := cg.write(cgFreeze, state); err != nil {
		return fmt.Errorf("cgroup thaw: %w", err)
	}
	cg.frozen.Store(false)
	return nil
}

// thawAfterKill thaws a cgroup that may be frozen, once its tasks have
// been sent SIGKILL: they die as they thaw.
func (cg *cgroup) thawAfterKill() {
	if cg.frozen.Load() {
		_ = cg.thaw()
	}
}
