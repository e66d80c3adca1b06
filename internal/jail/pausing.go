package jail

import "sync"

// Pausing is a sandbox's pause state, the same for every backend: one
// Pause or Resume at a time, and which of them came last. The backend
// gives the steps that differ (a cgroup freeze, a runsc pause); the
// order around them, and the enforcer's pause, are kept here once.
type Pausing struct {
	mu     sync.Mutex
	paused bool // under mu
}

// Pause runs freeze unless the sandbox is paused already, then holds e.
// check says why the sandbox cannot change now (it has ended, is being
// killed); freeze returns the error its caller should see.
func (p *Pausing) Pause(check, freeze func() error, e *Enforcer) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := check(); err != nil {
		return err
	}
	if p.paused {
		return nil
	}
	if err := freeze(); err != nil {
		return err
	}
	e.Pause()
	p.paused = true
	return nil
}

// Resume runs thaw unless the sandbox is running already, then lets e
// enforce again; check and thaw are as Pause's.
func (p *Pausing) Resume(check, thaw func() error, e *Enforcer) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := check(); err != nil {
		return err
	}
	if !p.paused {
		return nil
	}
	if err := thaw(); err != nil {
		return err
	}
	p.paused = false
	e.Resume()
	return nil
}

// Paused reports whether the last of Pause and Resume to succeed was
// Pause.
func (p *Pausing) Paused() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.paused
}
