package e2b

import (
	"slices"
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
	defaults map[string]string // a language's default context: its ID
	nextSeq  uint64
}

// codeContext is a code interpreter context: an interpreter state of the
// sandbox's session.
type codeContext struct {
	ID       string `json:"id"`
	Language string `json:"language"`
	Cwd      string `json:"cwd"`
	name     string // the session's interpreter state it is (Request.Context)
	seq      uint64 // creation order, the order E2B lists contexts in
}

// startupDefaults are the contexts E2B's code interpreter makes when it
// starts, listed first and in this order; other languages get their
// default context on their first run.
var startupDefaults = []string{"python", "javascript"}

// addContext records c, after every context recorded before. x.mu held.
func (x *box) addContext(c codeContext) codeContext {
	x.nextSeq++
	c.seq = x.nextSeq
	x.contexts[c.ID] = c
	return c
}

// defaultContext is lang's default context (the state a run with that
// language and no context uses), named on first use.
func (x *box) defaultContext(lang string) codeContext {
	x.mu.Lock()
	defer x.mu.Unlock()
	if c, ok := x.contexts[x.defaults[lang]]; ok {
		return c
	}
	c := x.addContext(codeContext{ID: newContextID(), Language: lang, Cwd: Home, name: languageContext(lang)})
	x.defaults[lang] = c.ID
	return c
}

// listContexts is the contexts in E2B's order: the startup defaults, then
// the others as they were made.
func (x *box) listContexts() []codeContext {
	x.mu.Lock()
	out := make([]codeContext, 0, len(x.contexts))
	for _, c := range x.contexts {
		out = append(out, c)
	}
	rank := func(c codeContext) int {
		for i, lang := range startupDefaults {
			if x.defaults[lang] == c.ID {
				return i - len(startupDefaults)
			}
		}
		return 0
	}
	slices.SortFunc(out, func(a, b codeContext) int {
		if ra, rb := rank(a), rank(b); ra != rb {
			return ra - rb
		}
		return int(a.seq) - int(b.seq)
	})
	x.mu.Unlock()
	return out
}

// removeContext forgets context id; ok is false if there was none.
func (x *box) removeContext(id string) (codeContext, bool) {
	x.mu.Lock()
	defer x.mu.Unlock()
	c, ok := x.contexts[id]
	delete(x.contexts, id)
	for lang, d := range x.defaults {
		if d == id {
			delete(x.defaults, lang)
		}
	}
	return c, ok
}

// context is context id; "default" is Python's default, as in E2B.
func (x *box) context(id string) (codeContext, bool) {
	if id == "default" {
		return x.defaultContext("python"), true
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	c, ok := x.contexts[id]
	return c, ok
}

func newBoxes() *boxes { return &boxes{byID: map[string]*box{}} }

// get returns sandbox id's state, making it on first use.
func (b *boxes) get(id string) *box {
	b.mu.Lock()
	defer b.mu.Unlock()
	x := b.byID[id]
	if x == nil {
		// pid 1 is the init of a VM; the first command is a child of it.
		x = &box{procs: map[uint32]*proc{}, nextPID: 100, contexts: map[string]codeContext{}, defaults: map[string]string{}}
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
