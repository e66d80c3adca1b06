package fleet

import (
	"errors"
	"fmt"

	"github.com/codecage/codecage/internal/jail"
)

// Pausing a sandbox in memory: its processes stop where they stand and
// keep their memory (natively the cgroup freezer, under gVisor runsc's
// pause), until it is resumed within this replica's life. Nothing is
// copied; a snapshot is another operation.
//
// A paused sandbox keeps its slot of the budget (and its memory): the
// budget counts sandboxes that exist, and a paused one does. Freeing the
// slots of paused sessions (turning them into snapshots first) is the
// service's to decide.

var (
	// ErrCannotPause means this sandbox cannot be paused: a zygote's cell
	// (a stateless run), or a host without a cgroup freezer (no cgroups,
	// rootless without delegation, cgroup v1 without the freezer
	// hierarchy). The error says which.
	ErrCannotPause = errors.New("fleet: this sandbox cannot be paused")
	// ErrEnded means the sandbox has ended, or is being killed: it can be
	// neither paused nor resumed.
	ErrEnded = jail.ErrEnded
)

// pauser is a sandbox that can be paused in memory (a native jail, a
// gVisor sandbox).
type pauser interface {
	Pause() error
	Resume() error
	Paused() bool
}

// Pause stops every process of the sandbox, its memory kept: it runs
// nothing and uses no CPU until Resume. Its wall-clock limit does not
// count down meanwhile (a session idles armed with its own lifetime: that
// lifetime is extended by the time paused), nor is its CPU budget
// checked; Kill and Close still end it. Pausing a paused sandbox changes
// nothing. It fails with [ErrEnded] once the sandbox has ended, and with
// [ErrCannotPause] where it cannot be paused.
func (l *Lease) Pause() error {
	p, err := l.pauser()
	if err != nil {
		return err
	}
	return pauseErr(p.Pause())
}

// Resume lets a paused sandbox run on from where it stood, its timeout
// with what it had left. Resuming a running sandbox changes nothing; one
// that has ended fails with [ErrEnded].
func (l *Lease) Resume() error {
	p, err := l.pauser()
	if err != nil {
		return err
	}
	return pauseErr(p.Resume())
}

// Paused reports whether the sandbox is paused.
func (l *Lease) Paused() bool {
	p, ok := l.current().(pauser)
	return ok && p.Paused()
}

func (l *Lease) pauser() (pauser, error) {
	b := l.current()
	p, ok := b.(pauser)
	if !ok {
		return nil, fmt.Errorf("%w: a pooled run's sandbox (a zygote's cell) is never paused", ErrCannotPause)
	}
	return p, nil
}

// pauseErr classifies a backend's error once: a host that cannot pause is
// ErrCannotPause; ErrEnded passes as it is.
func pauseErr(err error) error {
	if errors.Is(err, jail.ErrUnsupported) {
		return fmt.Errorf("%w: %v", ErrCannotPause, err)
	}
	return err
}
