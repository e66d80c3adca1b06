package runtime

import (
	_ "embed"
	"errors"
	"fmt"
	"io"
	"os"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// A kept-alive harness's state (every context's globals) is saved and
// loaded inside the sandbox, by state.py, with cloudpickle. The bytes were
// written by the sandbox's code: the supervisor never decodes them (this
// package imports no pickle library), it only counts and copies them.
//
// They cross the sandbox's wall in a pipe, not in the channel's frames:
// the supervisor makes the pipe and passes one end with the request
// (SCM_RIGHTS over the channel, a unix socket), so a state of any size
// streams without being held whole in memory on either side, nothing of
// it lands in the user's workspace (where the code could swap it or its
// quota would count it), and the supervisor enforces the size cap as it
// copies: over the cap it closes its end and the harness stops.

//go:embed state.py
var stateSource string

// Defaults of [StateOptions].
const (
	DefaultStateMaxBytes = 1 << 30
	DefaultStateTimeout  = 60 * time.Second
)

// stateGrace is how long past its own time limit the harness has to
// answer before the supervisor gives up on it.
const stateGrace = 2 * time.Second

// stateDrain is how long a snapshot's copy goes on once the harness has
// answered: what the pipe still holds, read at once unless the host is
// starved; the end of the data otherwise comes as end of file.
const stateDrain = 10 * time.Second

// StateOptions bound one snapshot or restore of a harness's state. Memory
// stays bounded by the sandbox's own limit.
type StateOptions struct {
	// MaxBytes caps the state's size (0: DefaultStateMaxBytes).
	MaxBytes int64
	// Timeout bounds the harness's work (0: DefaultStateTimeout).
	Timeout time.Duration
	// AllowedImports is the import policy a restore re-imports modules
	// under (nil: none); a module it refuses is reported as not restored.
	AllowedImports []string
}

func (o StateOptions) withDefaults() StateOptions {
	if o.MaxBytes <= 0 {
		o.MaxBytes = DefaultStateMaxBytes
	}
	if o.Timeout <= 0 {
		o.Timeout = DefaultStateTimeout
	}
	return o
}

// StateReport says what a snapshot saved or a restore loaded. Names,
// types and reasons come from the sandbox's code and are clipped by the
// harness (200 and 300 characters); lists hold at most 1000 entries each,
// the counts count them all.
type StateReport struct {
	// Bytes is the state's size, as the supervisor counted it.
	Bytes int64 `json:"bytes"`
	// Contexts are the execution contexts saved or restored ("" is the
	// default one).
	Contexts []string `json:"contexts"`
	// Globals were saved (restored), Count of them in all.
	Globals []Global `json:"globals"`
	Count   int      `json:"count"`
	// Lost were not saved (restored), each with why; LostCount in all.
	Lost      []Global `json:"lost"`
	LostCount int      `json:"lost_count"`
}

// Global is one global of a context.
type Global struct {
	Context string `json:"context"`
	Name    string `json:"name"`
	// Type is the value's type ("module" for a module).
	Type string `json:"type"`
	// Module is the module's name, for a module (saved by reference and
	// imported again at a restore).
	Module string `json:"module,omitempty"`
	// Reason says why it was lost.
	Reason string `json:"reason,omitempty"`
}

// Errors of the state operations.
var (
	// ErrStateTooLarge: the state exceeds StateOptions.MaxBytes.
	ErrStateTooLarge = errors.New("runtime: the state exceeds its size cap")
	// ErrStateRefused: the harness answered that it could not save or
	// load the state; the error says why. The harness goes on serving.
	ErrStateRefused = errors.New("runtime: the harness could not process the state")
	// ErrStateLost: the harness did not answer in time or the channel
	// failed. The channel is out of step: the caller must end the sandbox.
	ErrStateLost = errors.New("runtime: no answer to the state request")
)

// FDChannel is a harness channel that can carry descriptors: a unix
// socket (the native jail's and a zygote cell's).
type FDChannel interface {
	io.ReadWriter
	syscall.Conn
}

// SaveState asks the harness on ch to save its state and copies it to w,
// up to opt.MaxBytes (over it: [ErrStateTooLarge], and the harness goes
// on serving). It returns once the harness has answered, within
// opt.Timeout and a grace period ([ErrStateLost] past it). Not
// concurrently with another request on ch.
func SaveState(ch FDChannel, w io.Writer, opt StateOptions) (*StateReport, error) {
	opt = opt.withDefaults()
	r, pw, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	defer r.Close()
	growPipe(pw)
	deadline := time.Now().Add(opt.Timeout + stateGrace)
	replies, err := sendStateRequest(ch, Request{Op: "snapshot", Code: stateSource, KeepAlive: true, TimeoutMS: millis(opt.Timeout)}, pw)
	if err != nil {
		return nil, err
	}
	_ = r.SetReadDeadline(deadline)
	// Once the harness has answered, everything it wrote is in the pipe: a
	// process the code forked may still hold the write end, so the end of
	// the data is not waited for long. Long enough, though, for this side
	// to drain what the pipe holds on a loaded host (1 s was not, at load
	// 40: the copy met the deadline with data left).
	answered := make(chan stateReply, 1)
	go func() {
		rep := <-replies
		_ = r.SetReadDeadline(time.Now().Add(stateDrain))
		answered <- rep
	}()
	n, copyErr := copyCapped(w, r, opt.MaxBytes)
	_ = r.Close() // over the cap: the harness's next write fails
	return stateOutcome(answered, deadline, n, copyErr, opt, "writing")
}

// stateOutcome is a snapshot's or a restore's end: the harness's answer
// (by deadline), then what the copy of n bytes met. The harness's reason
// comes before a failed copy's: it stopped reading (or writing) because
// the state is bad, and says why.
func stateOutcome(replies <-chan stateReply, deadline time.Time, n int64, copyErr error, opt StateOptions, doing string) (*StateReport, error) {
	rep, err := awaitState(replies, deadline)
	if err != nil {
		return nil, err
	}
	switch {
	case errors.Is(copyErr, ErrStateTooLarge):
		return nil, fmt.Errorf("%w (%d bytes)", ErrStateTooLarge, opt.MaxBytes)
	case rep.Error != "":
		return nil, fmt.Errorf("%w: %s", ErrStateRefused, rep.Error)
	case copyErr != nil:
		return nil, fmt.Errorf("runtime: %s the state: %w", doing, copyErr)
	}
	rep.State.Bytes = n
	return rep.State, nil
}

// LoadState sends the state read from r, up to opt.MaxBytes, to the harness
// on ch, which loads it into its contexts. Garbage is refused by the
// harness ([ErrStateRefused], with its reason). Time limit and concurrency
// as [SaveState].
func LoadState(ch FDChannel, r io.Reader, opt StateOptions) (*StateReport, error) {
	opt = opt.withDefaults()
	pr, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	defer w.Close()
	growPipe(w)
	deadline := time.Now().Add(opt.Timeout + stateGrace)
	replies, err := sendStateRequest(ch, Request{Op: "restore", Code: stateSource, KeepAlive: true, TimeoutMS: millis(opt.Timeout), AllowedImports: opt.AllowedImports}, pr)
	if err != nil {
		return nil, err
	}
	_ = w.SetWriteDeadline(deadline)
	n, copyErr := copyCapped(w, r, opt.MaxBytes)
	_ = w.Close() // the end of the state, or, over the cap, a truncated one
	return stateOutcome(replies, deadline, n, copyErr, opt, "reading")
}

// WarmState has the harness on ch load what its state operations use
// (state.py compiled, cloudpickle imported), so that the first snapshot or
// restore does not wait for it: for a sandbox that waits for its user (a
// spare session). [ErrStateLost] past timeout (and a grace period): the
// caller ends the sandbox. Not concurrently with another request on ch.
func WarmState(ch io.ReadWriter, timeout time.Duration) error {
	if timeout <= 0 {
		timeout = DefaultStateTimeout
	}
	if err := WriteRequest(ch, Request{Op: "warm", Code: stateSource, KeepAlive: true, TimeoutMS: millis(timeout)}); err != nil {
		return fmt.Errorf("%w: %v", ErrStateLost, err)
	}
	replies := make(chan stateReply, 1)
	go func() {
		var rep stateReply
		rep.err = readJSONFrame(ch, &rep, MaxReplyBytes)
		replies <- rep
	}()
	rep, err := awaitState(replies, time.Now().Add(timeout+stateGrace))
	if err != nil {
		return err
	}
	if rep.Error != "" {
		return fmt.Errorf("%w: %s", ErrStateRefused, rep.Error)
	}
	return nil
}

// stateReply is the harness's answer to a state request.
type stateReply struct {
	State *StateReport `json:"state"`
	Error string       `json:"state_error"`
	err   error        // reading it failed
}

// sendStateRequest sends req and then one byte carrying fd, closes fd (the
// harness has its copy), and reads the answer in the background.
func sendStateRequest(ch FDChannel, req Request, fd *os.File) (<-chan stateReply, error) {
	err := WriteRequest(ch, req)
	if err == nil {
		err = sendFD(ch, fd)
	}
	_ = fd.Close()
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrStateLost, err)
	}
	replies := make(chan stateReply, 1)
	go func() {
		var rep stateReply
		rep.err = readJSONFrame(ch, &rep, MaxReplyBytes)
		replies <- rep
	}()
	return replies, nil
}

// awaitState waits for the answer until deadline.
func awaitState(replies <-chan stateReply, deadline time.Time) (stateReply, error) {
	timer := time.NewTimer(time.Until(deadline))
	defer timer.Stop()
	select {
	case rep := <-replies:
		if rep.err != nil {
			return rep, fmt.Errorf("%w: %v", ErrStateLost, rep.err)
		}
		if rep.State == nil && rep.Error == "" {
			return rep, fmt.Errorf("%w: the answer is not a state report", ErrStateLost)
		}
		return rep, nil
	case <-timer.C:
		return stateReply{}, fmt.Errorf("%w within its time limit", ErrStateLost)
	}
}

// sendFD sends one byte with fd attached, through the channel's poller
// when it has one.
func sendFD(ch syscall.Conn, fd *os.File) error {
	raw, err := ch.SyscallConn()
	if err != nil {
		return err
	}
	rights := unix.UnixRights(int(fd.Fd()))
	var sendErr error
	err = raw.Write(func(s uintptr) bool {
		sendErr = unix.Sendmsg(int(s), []byte{'S'}, rights, nil, 0)
		return sendErr != unix.EAGAIN
	})
	if err != nil {
		return err
	}
	return sendErr
}

// copyCapped copies r to w and stops with ErrStateTooLarge past max bytes
// (the bytes over it are not written).
func copyCapped(w io.Writer, r io.Reader, max int64) (int64, error) {
	n, err := io.Copy(w, io.LimitReader(r, max))
	if err != nil || n < max {
		return n, err
	}
	var one [1]byte
	if k, _ := io.ReadFull(r, one[:]); k > 0 {
		return n, ErrStateTooLarge
	}
	return n, nil
}

func millis(d time.Duration) int { return int(min(d.Milliseconds(), 1<<31-1)) }
