package session

import (
	"cmp"
	"crypto/rand"
	"encoding/hex"
	"slices"
	"sync"

	"github.com/codecage/codecage/internal/fleet"
)

// A session's code contexts are E2B's code interpreter contexts: named
// interpreter states of its sandbox, each with a language and a working
// directory, listed in the order E2B lists them. They live in the session,
// so that any replica serving it, and a restart of its interpreter, see
// the same ones.

// CodeContext is one code context of a session.
type CodeContext struct {
	ID       string `json:"id"`
	Language string `json:"language"`
	Cwd      string `json:"cwd"`
	// State is the interpreter state it is (the harness's context name).
	State string `json:"state"`
	seq   uint64 // creation order
}

// StartupContexts are the languages whose default contexts E2B's code
// interpreter makes when it starts: listed first, in this order.
var StartupContexts = []string{"python", "javascript"}

// contexts are a session's code contexts. Its lock is a leaf: taken under
// any of the session's locks or none, it takes none.
type contexts struct {
	mu       sync.Mutex
	byID     map[string]CodeContext
	defaults map[string]string // a language's default context: its id
	next     uint64
}

// LanguageState names the interpreter state runs with a language and no
// context use: one per language ("" is Python's, the harness's default).
func LanguageState(lang string) string {
	if lang == "python" || lang == "" {
		return ""
	}
	return "lang-" + lang
}

// NewContextID is a random UUID, as Jupyter's kernel ids (E2B's context
// ids) are.
func NewContextID() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	h := hex.EncodeToString(b)
	return h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}

// NewContext is a context of lang to make in the session, in cwd ("": its
// home), its state named by its id: the caller makes that state, then
// records it (AddContext).
func (se *Session) NewContext(lang, cwd string) CodeContext {
	cc := CodeContext{ID: NewContextID(), Language: lang, Cwd: cmp.Or(cwd, se.Home())}
	cc.State = cc.ID
	return cc
}

// StartCode is what starts an empty context of lang: nothing to run.
func StartCode(lang string) string {
	if lang == "python" || lang == "" {
		return "pass"
	}
	return ""
}

// UseContext resolves a run's context: context id's state and language
// (ok is false when the session has none of that id), or with no id the
// state and language the run named; when that is the default state of an
// enabled language, its default context is recorded, and a list shows it
// from then on.
func (se *Session) UseContext(id, state, lang string, enabled func(lang string) bool) (string, string, bool) {
	if id != "" {
		cc, ok := se.Context(id)
		return cc.State, cc.Language, ok
	}
	if l, ok := fleet.NormalizeLanguage(lang); ok && enabled(l) && state == LanguageState(l) {
		se.DefaultContext(l)
	}
	return state, lang, true
}

// ShowStartupContexts records the startup default contexts of the
// enabled languages, as E2B's interpreter has them from its start.
func (se *Session) ShowStartupContexts(enabled func(lang string) bool) {
	for _, lang := range StartupContexts {
		if enabled(lang) {
			se.DefaultContext(lang)
		}
	}
}

// addLocked records c after every context recorded before; c.mu held.
func (c *contexts) addLocked(cc CodeContext) CodeContext {
	if c.byID == nil {
		c.byID, c.defaults = map[string]CodeContext{}, map[string]string{}
	}
	c.next++
	cc.seq = c.next
	c.byID[cc.ID] = cc
	return cc
}

// AddContext records a new context of the session (its state made).
func (se *Session) AddContext(cc CodeContext) CodeContext {
	c := &se.contexts
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.addLocked(cc)
}

// DefaultContext is lang's default context, the state runs with that
// language and no context use, recorded on first use.
func (se *Session) DefaultContext(lang string) CodeContext {
	c := &se.contexts
	c.mu.Lock()
	defer c.mu.Unlock()
	if cc, ok := c.byID[c.defaults[lang]]; ok {
		return cc
	}
	cc := c.addLocked(CodeContext{ID: NewContextID(), Language: lang, Cwd: se.Home(), State: LanguageState(lang)})
	c.defaults[lang] = cc.ID
	return cc
}

// Context is context id; "default" is Python's default, as in E2B.
func (se *Session) Context(id string) (CodeContext, bool) {
	if id == "default" {
		return se.DefaultContext("python"), true
	}
	c := &se.contexts
	c.mu.Lock()
	defer c.mu.Unlock()
	cc, ok := c.byID[id]
	return cc, ok
}

// RemoveContext forgets context id; ok is false if there was none.
func (se *Session) RemoveContext(id string) (CodeContext, bool) {
	c := &se.contexts
	c.mu.Lock()
	defer c.mu.Unlock()
	cc, ok := c.byID[id]
	delete(c.byID, id)
	for lang, d := range c.defaults {
		if d == id {
			delete(c.defaults, lang)
		}
	}
	return cc, ok
}

// Contexts lists the contexts in E2B's order: the startup defaults, then
// the others as they were made.
func (se *Session) Contexts() []CodeContext {
	c := &se.contexts
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]CodeContext, 0, len(c.byID))
	for _, cc := range c.byID {
		out = append(out, cc)
	}
	rank := func(cc CodeContext) int {
		for i, lang := range StartupContexts {
			if c.defaults[lang] == cc.ID {
				return i - len(StartupContexts)
			}
		}
		return 0
	}
	slices.SortFunc(out, func(a, b CodeContext) int {
		if ra, rb := rank(a), rank(b); ra != rb {
			return ra - rb
		}
		return int(a.seq) - int(b.seq)
	})
	return out
}
