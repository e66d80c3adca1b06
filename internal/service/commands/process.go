package commands

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/codecage/codecage/internal/bounded"
	"github.com/codecage/codecage/internal/service/errdefs"
)

// Processes are commands started in the background of a session (E2B's
// processes): a start returns once the command runs, and its output is
// kept, so that the stream that started it and any that connect later,
// through any replica, follow it. A process is kept a while after its
// end, for a late connect or wait, then forgotten.

// ProcessSpec is how a process was asked for, given back when listed.
type ProcessSpec struct {
	Cmd  string            `json:"cmd"`
	Args []string          `json:"args"`
	Envs map[string]string `json:"envs,omitempty"`
	Cwd  *string           `json:"cwd,omitempty"`
}

// ProcessInfo describes a process of a session.
type ProcessInfo struct {
	PID  uint32      `json:"pid"`
	Tag  *string     `json:"tag,omitempty"`
	Spec ProcessSpec `json:"spec"`
}

// ProcessEvent is what a follower of a process hears: first "start" (PID
// is the process's), then pieces of its output, Stream "stdout",
// "stderr" or "pty" (a terminal's one stream), and "keepalive" when
// nothing came for a while.
type ProcessEvent struct {
	Stream string
	Data   []byte
	PID    uint32
}

// Selector names a process by its pid, or else by its tag.
type Selector struct {
	PID *uint32 `json:"pid,omitempty"`
	Tag *string `json:"tag,omitempty"`
}

// keptAfterEnd is how long an ended process can still be followed.
const keptAfterEnd = time.Minute

// firstPID: pid 1 is a VM's init; the first command is a child of it.
const firstPID = 100

// Processes are the processes of every session of this replica. It is
// safe for concurrent use.
type Processes struct {
	mu        sync.Mutex
	bySession map[string]*sessionProcs
}

type sessionProcs struct {
	last  uint32
	byPID map[uint32]*Process
}

// Process is one process: its output so far, its end, its input.
type Process struct {
	info   ProcessInfo
	owner  string
	cancel context.CancelFunc

	mu sync.Mutex
	// events is its output's last historyBytes or so, for followers from
	// its start, and what its live followers have yet to send, up to
	// lagBytes; first counts the events dropped before it.
	events []ProcessEvent
	first  int
	kept   int
	// following holds each live follower's next event (counted from the
	// process's first).
	following map[*int]struct{}
	end       *CommandResult
	ended     bool
	// gone: it ended with its session (closed, or at its end of life):
	// it has no end, its followers get ErrSessionGone.
	gone bool
	wake chan struct{} // closed and replaced when events grow

	// started is closed when the command runs, or, with refused set,
	// when the service refused it (it never ran).
	started   chan struct{}
	startOnce sync.Once
	refused   error
	input     *CommandInput // with stdin or a terminal, once it runs
}

// NewProcesses returns an empty table of processes.
func NewProcesses() *Processes { return &Processes{bySession: map[string]*sessionProcs{}} }

// Add records a process about to start in session, cancel ending it.
func (ps *Processes) Add(session, owner string, tag *string, spec ProcessSpec, cancel context.CancelFunc) *Process {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	sp := ps.bySession[session]
	if sp == nil {
		sp = &sessionProcs{last: firstPID, byPID: map[uint32]*Process{}}
		ps.bySession[session] = sp
	}
	sp.last++
	p := &Process{info: ProcessInfo{PID: sp.last, Tag: tag, Spec: spec}, owner: owner, cancel: cancel,
		wake: make(chan struct{}), started: make(chan struct{})}
	sp.byPID[p.info.PID] = p
	return p
}

// Forget drops p from session's table.
func (ps *Processes) Forget(session string, p *Process) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if sp := ps.bySession[session]; sp != nil && sp.byPID[p.info.PID] == p {
		delete(sp.byPID, p.info.PID)
		if len(sp.byPID) == 0 {
			delete(ps.bySession, session) // its pids start again at firstPID
		}
	}
}

// Find returns the owner's process of session that sel names.
func (ps *Processes) Find(session, owner string, sel Selector) (*Process, error) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if sp := ps.bySession[session]; sp != nil {
		for _, p := range sp.byPID {
			if p.owner == owner && (sel.PID != nil && p.info.PID == *sel.PID || sel.PID == nil && sel.Tag != nil && p.info.Tag != nil && *p.info.Tag == *sel.Tag) {
				return p, nil
			}
		}
	}
	return nil, fmt.Errorf("no such process %s: %w", describe(sel), errdefs.ErrNotFound)
}

func describe(sel Selector) string {
	switch {
	case sel.PID != nil:
		return fmt.Sprintf("pid %d", *sel.PID)
	case sel.Tag != nil:
		return "tag " + bounded.Quote(*sel.Tag)
	}
	return "(no pid or tag)"
}

// List is the owner's processes of session that still run.
func (ps *Processes) List(session, owner string) []ProcessInfo {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	out := []ProcessInfo{}
	if sp := ps.bySession[session]; sp != nil {
		for _, p := range sp.byPID {
			p.mu.Lock()
			if !p.ended && p.owner == owner {
				out = append(out, p.info)
			}
			p.mu.Unlock()
		}
	}
	return out
}

// Run runs p's command, req, with run (the service's envelope around
// Commands.Run), recording what it does; gone says whether the session
// went (closed, or at its end) when the command was canceled. It returns
// when the command has ended.
func (ps *Processes) Run(session string, p *Process, req CommandRequest, run func(CommandRequest) (*CommandResult, error), gone func() bool) {
	defer p.cancel()
	defer time.AfterFunc(keptAfterEnd, func() { ps.Forget(session, p) })
	stream := "stdout"
	if req.Terminal != nil {
		stream = "pty"
	}
	var streamed [2]int
	req.OnInput = func(in *CommandInput) {
		p.mu.Lock()
		p.input = in
		p.mu.Unlock()
	}
	req.OnOutput = func(s, line string) {
		if s == "stderr" && req.Terminal == nil {
			streamed[1] += len(line)
			p.add(ProcessEvent{Stream: s, Data: []byte(line)})
			return
		}
		streamed[0] += len(line)
		p.add(ProcessEvent{Stream: stream, Data: []byte(line)})
	}
	req.OnStart = func() { p.markStarted(nil) }
	req.Streamed = true // as envd's: a process's output streams whole
	res, err := run(req)
	if err != nil {
		ps.Forget(session, p)
		p.markStarted(err)
		p.finish(nil, false) // ends followers; the start reports err
		return
	}
	p.markStarted(nil)
	if res.Limit != nil && *res.Limit == LimitCanceled && gone() {
		p.finish(nil, true)
		return
	}
	// What the streams held back: a last line without its newline.
	if len(res.Stdout) > streamed[0] {
		p.add(ProcessEvent{Stream: stream, Data: []byte(res.Stdout[streamed[0]:])})
	}
	if len(res.Stderr) > streamed[1] {
		p.add(ProcessEvent{Stream: "stderr", Data: []byte(res.Stderr[streamed[1]:])})
	}
	p.finish(res, false)
}

// Info describes p.
func (p *Process) Info() ProcessInfo { return p.info }

// Cancel ends p.
func (p *Process) Cancel() { p.cancel() }

// WaitStarted waits until p runs, or returns why it never will.
func (p *Process) WaitStarted(ctx context.Context) error {
	select {
	case <-p.started:
		return p.refused
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (p *Process) markStarted(refused error) {
	p.startOnce.Do(func() {
		p.refused = refused
		close(p.started)
	})
}

// A process's output streams whole to whoever follows it live, however
// long it runs (a server's log): what a live follower has yet to send is
// kept, up to lagBytes (one that falls further behind skips the oldest).
// A follower from the start that comes later gets the last historyBytes.
const (
	historyBytes = 1 << 20
	lagBytes     = 8 << 20
)

func (p *Process) add(ev ProcessEvent) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.events = append(p.events, ev)
	p.kept += len(ev.Data)
	p.trimLocked()
	p.wakeLocked()
}

// trimLocked drops the oldest events past historyBytes that every live
// follower has read (past lagBytes, whether read or not). It runs on
// each event and as followers read on or leave: history a lagging
// follower held past historyBytes is dropped once it has read it, not
// kept for a later follower from the start.
func (p *Process) trimLocked() {
	behind := p.first + len(p.events) // the slowest live follower's next event
	for pos := range p.following {
		behind = min(behind, *pos)
	}
	for len(p.events) > 1 && (p.kept > lagBytes || p.kept > historyBytes && p.first < behind) {
		p.kept -= len(p.events[0].Data)
		p.events[0] = ProcessEvent{}
		p.events = p.events[1:]
		p.first++
	}
}

// finish ends p with res (nil: refused, or gone with its session).
func (p *Process) finish(res *CommandResult, gone bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.end, p.ended, p.gone = res, true, gone
	p.wakeLocked()
}

func (p *Process) wakeLocked() {
	close(p.wake)
	p.wake = make(chan struct{})
}

// Ended reports whether p has ended.
func (p *Process) Ended() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.ended
}

// Follow sends p's start event, then its output from its start
// (fromStart) or from now, until its end, which it returns; or until ctx ends (the client went
// away: the process goes on, as in E2B). A process quiet for keepalive
// sends a keepalive event. A process that went with its session returns
// ErrSessionGone.
func (p *Process) Follow(ctx context.Context, fromStart bool, keepalive time.Duration, send func(ProcessEvent) error) (*CommandResult, error) {
	p.mu.Lock()
	from := p.first + len(p.events) // counted from the process's first event
	if fromStart {
		from = 0
	}
	p.mu.Unlock()
	if err := send(ProcessEvent{Stream: "start", PID: p.info.PID}); err != nil {
		return nil, err
	}
	t := time.NewTimer(keepalive)
	defer t.Stop()
	p.mu.Lock()
	if p.following == nil {
		p.following = map[*int]struct{}{}
	}
	p.following[&from] = struct{}{}
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		delete(p.following, &from)
		p.trimLocked()
		p.mu.Unlock()
	}()
	for {
		p.mu.Lock()
		from = max(from, p.first) // what fell out of the history is skipped
		batch, wake, ended, end, gone := p.events[from-p.first:], p.wake, p.ended, p.end, p.gone
		p.mu.Unlock()
		for _, ev := range batch {
			if err := send(ev); err != nil {
				return nil, err
			}
		}
		p.mu.Lock()
		from += len(batch)
		p.trimLocked()
		p.mu.Unlock()
		switch {
		case len(batch) > 0:
			continue // the end may be in a later batch
		case ended && gone:
			return nil, fmt.Errorf("%w: process %d ended with its session", errdefs.ErrSessionGone, p.info.PID)
		case ended && end == nil:
			return nil, fmt.Errorf("process %d never ran: %w", p.info.PID, p.refused)
		case ended:
			return end, nil
		}
		t.Reset(keepalive)
		select {
		case <-wake:
		case <-t.C:
			if err := send(ProcessEvent{Stream: "keepalive"}); err != nil {
				return nil, err
			}
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// ProcessInput is what a caller does to a process's input: write Data
// (Write), end it (Close), or resize its terminal (Resize); none of them
// only checks that the process exists.
type ProcessInput struct {
	Write  bool          `json:"write,omitempty"`
	Data   []byte        `json:"data,omitempty"`
	Close  bool          `json:"close,omitempty"`
	Resize *TerminalSize `json:"resize,omitempty"`
}

// Input does in to p's stdin or terminal. A process started without one
// has read an empty stdin from the start: closing it again succeeds.
func (p *Process) Input(in ProcessInput) error {
	p.mu.Lock()
	ended, input := p.ended, p.input
	p.mu.Unlock()
	switch {
	case !in.Write && !in.Close && in.Resize == nil:
		return nil
	case in.Close && input == nil:
		return nil
	case in.Close:
		return input.Close()
	case ended:
		return fmt.Errorf("process %d has ended: %w", p.info.PID, errdefs.ErrNotFound)
	case input == nil:
		return fmt.Errorf("%w: process %d was started without stdin: start it with stdin (commands.run(cmd, {stdin: true})) or as a pty", errdefs.ErrInvalidRequest, p.info.PID)
	case in.Resize != nil:
		return input.Resize(in.Resize.Cols, in.Resize.Rows)
	}
	return input.Write(in.Data)
}

// Signal ends p (as SIGKILL or SIGTERM would).
func (p *Process) Signal() error {
	if p.Ended() {
		return fmt.Errorf("process %d has ended: %w", p.info.PID, errdefs.ErrNotFound)
	}
	p.cancel()
	return nil
}
