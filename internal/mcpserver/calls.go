package mcpserver

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// calls are the tool calls in flight, by what may end them early: a
// streamable MCP session (DELETE /mcp) or a legacy SSE client (its stream
// ended or was dropped). The SDK's session close waits for calls to end
// and then sends nothing; ending them first frees their sandboxes at
// once and lets each answer with an error.
type calls struct {
	mu sync.Mutex
	m  map[any]map[*inflight]struct{}
}

type inflight struct {
	cancel context.CancelCauseFunc
	user   string
}

// mcpSessionKey keys a streamable session's calls.
type mcpSessionKey string

// mcpPostKey keys the calls of one POST to /mcp (see postHeader).
type mcpPostKey string

// sseClientKey is the context key of a legacy SSE client.
type sseClientKey struct{}

// sseClient identifies one legacy SSE stream (the SDK gives SSE sessions
// no id).
type sseClient struct{}

var (
	errSessionDeleted = errors.New("the MCP session was deleted (DELETE /mcp)")
	errClientGone     = errors.New("the SSE client's stream ended")
	errRequestGone    = errors.New("the client's request ended before its answer")
)

// codeSessionClosed is the JSON-RPC code of a call ended by its session's
// end: the SDK's own code for calls that meet a closing connection.
const codeSessionClosed = -32004

func newCalls() *calls { return &calls{m: map[any]map[*inflight]struct{}{}} }

// middleware registers each tools/call under its session or SSE client
// and its POST, and turns a call ended by the session's or the client's
// end into a JSON-RPC error.
func (c *calls) middleware(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		if method != "tools/call" {
			return next(ctx, method, req)
		}
		var keys []any
		if cl, ok := ctx.Value(sseClientKey{}).(*sseClient); ok {
			keys = append(keys, cl)
		} else if ss := req.GetSession(); ss != nil {
			if ss, ok := ss.(*mcp.ServerSession); ok && ss.ID() != "" {
				keys = append(keys, mcpSessionKey(ss.ID()))
			}
		}
		user := ""
		if ex := req.GetExtra(); ex != nil {
			if ex.TokenInfo != nil {
				user = ex.TokenInfo.UserID
			}
			if p := ex.Header.Get(postHeader); p != "" {
				keys = append(keys, mcpPostKey(p))
			}
		}
		if keys == nil {
			return next(ctx, method, req)
		}
		ctx, cancel := context.WithCancelCause(ctx)
		call := &inflight{cancel: cancel, user: user}
		for _, k := range keys {
			c.add(k, call)
		}
		defer func() {
			for _, k := range keys {
				c.remove(k, call)
			}
			cancel(nil)
		}()
		res, err := next(ctx, method, req)
		if cause := context.Cause(ctx); errors.Is(cause, errSessionDeleted) || errors.Is(cause, errClientGone) || errors.Is(cause, errRequestGone) {
			return nil, &jsonrpc.Error{Code: codeSessionClosed, Message: "canceled: " + cause.Error()}
		}
		return res, err
	}
}

func (c *calls) add(key any, call *inflight) {
	c.mu.Lock()
	defer c.mu.Unlock()
	set := c.m[key]
	if set == nil {
		set = map[*inflight]struct{}{}
		c.m[key] = set
	}
	set[call] = struct{}{}
}

func (c *calls) remove(key any, call *inflight) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.m[key], call)
	if len(c.m[key]) == 0 {
		delete(c.m, key)
	}
}

// cancel ends key's calls made by user, and says how many.
func (c *calls) cancel(key any, user string, cause error) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for call := range c.m[key] {
		if call.user == user {
			call.cancel(cause)
			n++
		}
	}
	return n
}

// cancelAll ends every call of key, and says how many.
func (c *calls) cancelAll(key any, cause error) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	for call := range c.m[key] {
		call.cancel(cause)
	}
	return len(c.m[key])
}

// posts counts the POSTs in flight per streamable session, so that a
// DELETE can let the answers of the calls it ended go out before the SDK
// closes the session (after which it writes nothing).
type posts struct {
	mu      sync.Mutex
	n       map[string]int
	changed chan struct{}
}

func newPosts() *posts { return &posts{n: map[string]int{}, changed: make(chan struct{})} }

func (p *posts) start(sid string) (done func()) {
	p.mu.Lock()
	p.n[sid]++
	p.mu.Unlock()
	return func() {
		p.mu.Lock()
		if p.n[sid]--; p.n[sid] <= 0 {
			delete(p.n, sid)
		}
		close(p.changed)
		p.changed = make(chan struct{})
		p.mu.Unlock()
	}
}

// wait waits until sid has no POST in flight, or for at most d.
func (p *posts) wait(sid string, d time.Duration) {
	timer := time.NewTimer(d)
	defer timer.Stop()
	for {
		p.mu.Lock()
		n, changed := p.n[sid], p.changed
		p.mu.Unlock()
		if n == 0 {
			return
		}
		select {
		case <-changed:
		case <-timer.C:
			return
		}
	}
}
