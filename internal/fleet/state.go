package fleet

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/codecage/codecage/internal/jail"
	"github.com/codecage/codecage/internal/runtime"
)

// A native session's interpreter state, saved and loaded by its harness
// (runtime.SaveState): every context's globals, pickled inside the sandbox.
// Under gVisor a session is saved whole, as a memory image, which keeps
// what pickling cannot (generators, threads, sockets); these methods
// refuse it.

// The state operations' options, report and errors.
type (
	// StateOptions bound a snapshot or a restore: size cap, time limit,
	// and the import policy modules are re-imported under.
	StateOptions = runtime.StateOptions
	// StateReport says what was saved or restored, and what was not, why.
	StateReport = runtime.StateReport
	// StateGlobal is one global of a report.
	StateGlobal = runtime.Global
)

var (
	// ErrStateNotSupported: the sandbox's interpreter state cannot be
	// saved this way (a gVisor sandbox, or one without a harness channel).
	ErrStateNotSupported = errors.New("fleet: snapshots of an interpreter's state are for native sandboxes; gVisor sandboxes are saved as memory images")
	// ErrStateTooLarge: the state exceeds StateOptions.MaxBytes.
	ErrStateTooLarge = runtime.ErrStateTooLarge
	// ErrStateRefused: the harness could not save or load the state, and
	// says why (garbage given to a restore, a time limit passed); the
	// sandbox goes on serving.
	ErrStateRefused = runtime.ErrStateRefused
	// ErrStateLost: the harness did not answer; the sandbox was killed.
	ErrStateLost = runtime.ErrStateLost
)

// SnapshotState writes the interpreter state of the lease's kept-alive
// harness (a session's: every context's globals) to w, and says what it
// saved and what it could not, by name. Over opt.MaxBytes it fails with
// ErrStateTooLarge and the session goes on. Not concurrently with Run.
func (l *Lease) SnapshotState(w io.Writer, opt StateOptions) (*StateReport, error) {
	ch, err := l.stateChannel()
	if err != nil {
		return nil, err
	}
	rep, err := runtime.SaveState(ch, w, opt)
	return rep, l.stateFailed(err)
}

// SnapshotStateFile is SnapshotState into a new file at path (mode 0600),
// which exists only if the snapshot succeeded: a failed one leaves no
// partial file.
func (l *Lease) SnapshotStateFile(path string, opt StateOptions) (*StateReport, error) {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*.partial")
	if err != nil {
		return nil, err
	}
	rep, err := l.SnapshotState(f, opt)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), path)
	}
	if err != nil {
		_ = os.Remove(f.Name())
		return nil, err
	}
	return rep, nil
}

// RestoreState loads a state SnapshotState wrote, read from r, into the
// lease's harness (a fresh session's): the contexts it names are replaced
// by the saved ones, modules are imported again under
// opt.AllowedImports, and the report says what was restored and what was
// not, by name. The bytes are only decoded inside the sandbox: garbage is
// refused there (ErrStateRefused) and the harness is left as it was.
func (l *Lease) RestoreState(r io.Reader, opt StateOptions) (*StateReport, error) {
	ch, err := l.stateChannel()
	if err != nil {
		return nil, err
	}
	rep, err := runtime.LoadState(ch, r, opt)
	return rep, l.stateFailed(err)
}

// RestoreStateFile is RestoreState from the file at path.
func (l *Lease) RestoreStateFile(path string, opt StateOptions) (*StateReport, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return l.RestoreState(f, opt)
}

// WarmState has the lease's kept-alive harness load what SnapshotState and
// RestoreState use, ahead of them: for a sandbox that waits for its user.
// It does not mark the lease used (nothing of the code's ran). A harness
// that does not answer within timeout is killed (ErrStateLost).
func (l *Lease) WarmState(timeout time.Duration) error {
	if l.backend != Native {
		return ErrStateNotSupported
	}
	ch, ok := l.current().Channel().(runtime.FDChannel)
	if !ok {
		return ErrStateNotSupported
	}
	return l.stateFailed(runtime.WarmState(ch, timeout))
}

// stateChannel is the harness channel, when it can carry the state's pipe.
func (l *Lease) stateChannel() (runtime.FDChannel, error) {
	if l.backend != Native {
		return nil, ErrStateNotSupported
	}
	l.used.Store(true)
	ch, ok := l.current().Channel().(runtime.FDChannel)
	if !ok {
		return nil, ErrStateNotSupported
	}
	return ch, nil
}

// stateFailed ends a sandbox whose harness did not answer: its channel is
// out of step, so nothing else could be asked of it.
func (l *Lease) stateFailed(err error) error {
	if errors.Is(err, ErrStateLost) {
		l.Kill(jail.LimitTimeout)
		return fmt.Errorf("%w (the sandbox was ended)", err)
	}
	return err
}
