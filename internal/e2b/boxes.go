package e2b

import (
	"sync"
)

// boxes is the protocol state this surface keeps per sandbox: the
// processes it started and the code contexts it named. The sandboxes
// themselves are the service's sessions.
type boxes struct {
	mu   sync.Mutex
	byID map[string]*box
}

type box struct {
	mu       sync.Mutex
	procs    map[uint32]*proc
	nextPID  uint32
	contexts map[string]codeContext
}

// codeContext is a code interpreter context: an interpreter state of the
// sandbox's session.
type codeContext struct {
	ID       string `json:"id"`
	Language string `json:"language"`
	Cwd      string `json:"cwd"`
}

func newBoxes() *boxes { return &boxes{byID: map[string]*box{}} }

// get returns sandbox id's state, making it on first use.
func (b *boxes) get(id string) *box {
	b.mu.Lock()
	defer b.mu.Unlock()
	x := b.byID[id]
	if x == nil {
		// pid 1 is the init of a VM; the first command is a child of it.
		x = &box{procs: map[uint32]*proc{}, nextPID: 100, contexts: map[string]codeContext{}}
		b.byID[id] = x
	}
	return x
}

// drop forgets a sandbox that is gone, and stops what it still ran.
func (b *boxes) drop(id string) {
	b.mu.Lock()
	x := b.byID[id]
	delete(b.byID, id)
	b.mu.Unlock()
	if x == nil {
		return
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	for _, p := range x.procs {
		p.cancel()
	}
}
