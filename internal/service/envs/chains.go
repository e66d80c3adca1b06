package envs

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/codecage/codecage/internal/bounded"
)

// A chain is a build of one environment through intermediate ones (an
// E2B template's stages, as its adapter plans them), run in the
// background: it is requested (an id), started with its stages, and read
// by id (its status, its log a page at a time, why it failed). The
// service keeps a bounded number of chains, forgetting old finished ones.

const (
	// MaxChainsKept is how many chains the service remembers.
	MaxChainsKept  = 32
	maxLogEntries  = 2000
	maxLogBytes    = 512 << 10
	maxChainIdle   = time.Hour // a chain requested and never started
	maxChainLogCut = maxBuildLogLine
)

// ChainStatus is where a chain is.
type ChainStatus string

const (
	ChainWaiting  ChainStatus = "waiting" // requested, or waiting for a build slot
	ChainBuilding ChainStatus = "building"
	ChainReady    ChainStatus = "ready"
	ChainFailed   ChainStatus = "failed"
)

// LogEntry is one line of a chain's log.
type LogEntry struct {
	Time    time.Time
	Level   string // info, warn, error
	Message string
	Step    string // the step of the plan it belongs to ("": none)
}

// Failure is why a chain failed: at which step of its plan, and what.
type Failure struct {
	Step    string
	Message string
}

func (f *Failure) Error() string { return f.Message }

// ChainPage is a chain's status with a page of its log.
type ChainPage struct {
	ID, Name string
	Status   ChainStatus
	Logs     []LogEntry
	Failure  *Failure
}

var (
	// ErrTooManyChains: every chain kept is waiting or running.
	ErrTooManyChains = errors.New("too many template builds are waiting or running; retry when one has finished")
	// ErrChainRunning: the environment has a chain waiting or running.
	ErrChainRunning = errors.New("the template is being built")
	// ErrChainStarted: the chain was started already.
	ErrChainStarted = errors.New("the template build has started already")
)

// Chain is one chain build.
type Chain struct {
	id, name, owner string
	created         time.Time

	mu       sync.Mutex
	status   ChainStatus
	started  bool
	failure  *Failure
	logs     []LogEntry
	logBytes int
	dropped  int    // lines not kept (over the caps)
	partial  []byte // a line the build's log has not ended yet
}

// log appends one entry, within the caps: past them lines are counted,
// not kept, so offsets a reader holds stay valid.
func (c *Chain) log(level, step, msg string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.addLocked(level, step, msg)
}

func (c *Chain) addLocked(level, step, msg string) {
	if len(msg) > maxChainLogCut {
		msg = msg[:maxChainLogCut] + "…"
	}
	if len(c.logs) >= maxLogEntries || c.logBytes+len(msg) > maxLogBytes {
		c.dropped++
		return
	}
	c.logs = append(c.logs, LogEntry{Time: time.Now().UTC(), Level: level, Message: msg, Step: step})
	c.logBytes += len(msg)
}

// Write takes a stage's build output (BuildRequest.Log), a line at a time.
func (c *Chain) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := len(p)
	for len(p) > 0 {
		i := indexByte(p, '\n')
		if i < 0 {
			room := maxChainLogCut + 1 - len(c.partial)
			c.partial = append(c.partial, p[:min(len(p), max(room, 0))]...)
			break
		}
		line := append(c.partial, p[:i]...)
		c.partial = nil
		c.addLocked("info", "", string(line))
		p = p[i+1:]
	}
	return n, nil
}

func indexByte(p []byte, b byte) int {
	for i, x := range p {
		if x == b {
			return i
		}
	}
	return -1
}

// finish records the outcome; the last line says how much of the log was
// not kept.
func (c *Chain) finish(f *Failure) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.partial) > 0 {
		c.addLocked("info", "", string(c.partial))
		c.partial = nil
	}
	if c.dropped > 0 {
		c.logs = append(c.logs, LogEntry{Time: time.Now().UTC(), Level: "warn",
			Message: fmt.Sprintf("%d lines of the build's log were not kept (at most %d lines, %d bytes)", c.dropped, maxLogEntries, maxLogBytes)})
		c.dropped = 0
	}
	if f != nil {
		c.status, c.failure = ChainFailed, f
		c.logs = append(c.logs, LogEntry{Time: time.Now().UTC(), Level: "error", Message: f.Message, Step: f.Step})
		return
	}
	c.status = ChainReady
}

// page is the chain's status with its log entries from offset on.
func (c *Chain) page(offset, limit int) ChainPage {
	c.mu.Lock()
	defer c.mu.Unlock()
	offset = min(max(offset, 0), len(c.logs))
	end := min(offset+max(limit, 0), len(c.logs))
	return ChainPage{ID: c.id, Name: c.name, Status: c.status, Logs: append([]LogEntry{}, c.logs[offset:end]...), Failure: c.failure}
}

func (c *Chain) done() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.status == ChainReady || c.status == ChainFailed
}

// busy: started and not finished.
func (c *Chain) busy() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.started && c.status != ChainReady && c.status != ChainFailed
}

// chains keeps the service's chains.
type chains struct {
	mu    sync.Mutex
	list  []*Chain      // oldest first
	slots chan struct{} // a token per chain running: SANDBOX_ENV_MAX_BUILDS
	// sharedMu is held while a chain checks and builds a shared stage.
	sharedMu sync.Mutex
}

// add records a new chain of name, forgetting the oldest finished (or
// never started) ones beyond the bound; a name has one chain waiting or
// running at a time.
func (t *chains) add(id, name, owner string) (*Chain, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, c := range t.list {
		if c.name == name && c.busy() {
			return nil, fmt.Errorf("%w: template %s, build %s; retry when it has finished", ErrChainRunning, bounded.Quote(name), c.id)
		}
	}
	for len(t.list) >= MaxChainsKept {
		i := t.oldestForgettable()
		if i < 0 {
			return nil, ErrTooManyChains
		}
		t.list = append(t.list[:i], t.list[i+1:]...)
	}
	c := &Chain{id: id, name: name, owner: owner, created: time.Now(), status: ChainWaiting}
	t.list = append(t.list, c)
	return c, nil
}

func (t *chains) oldestForgettable() int {
	for i, c := range t.list {
		c.mu.Lock()
		idle := !c.started && time.Since(c.created) > maxChainIdle
		c.mu.Unlock()
		if c.done() || idle {
			return i
		}
	}
	return -1
}

// get is a chain of the owner's.
func (t *chains) get(name, id, owner string) *Chain {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, c := range t.list {
		if c.id == id && c.name == name && c.owner == owner {
			return c
		}
	}
	return nil
}

// latest is the newest chain of name (nil: none kept).
func (t *chains) latest(name string) *Chain {
	t.mu.Lock()
	defer t.mu.Unlock()
	for i := len(t.list) - 1; i >= 0; i-- {
		if t.list[i].name == name {
			return t.list[i]
		}
	}
	return nil
}
