package mcpserver

import (
	"bytes"
	"encoding/json"
	"io"
	"mime"
	"net/http"
	"net/url"
	"sync"
	"sync/atomic"

	"github.com/codecage/codecage/internal/frontdoor"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Over HTTP the SDK decodes a POSTed frame itself, so ids are mapped on
// the bytes: idHandler checks each POSTed frame (malformed ones get a
// JSON-RPC error, not the SDK's plain-text 400) and rewrites a call's id
// to a token of an idMap (the one stdio uses); the answer gets the
// client's raw id back where it goes out: the POST's own response on
// streamable HTTP (answerWriter, JSON body or SSE events), the GET stream
// on legacy SSE (the sseWriter's rewrite hook). Nothing valid is refused:
// an id that is not a string, a number or null is invalid JSON-RPC, and
// the ids of responses the client POSTs are the server's own. (The
// streamable handler has no event store: a replayed event, which would
// carry the token, cannot happen.)

// idSessions are the id maps of one HTTP transport by session id.
// Streamable HTTP keeps a map while POSTs of its session are in flight
// (an answer only goes out on its own POST; a cancellation comes in
// another POST of the session); legacy SSE keeps one per GET stream.
type idSessions struct {
	mu sync.Mutex // guards m and the entries' refs
	m  map[string]*idSession
}

type idSession struct {
	ids  *idMap
	refs int
}

func newIDSessions() *idSessions { return &idSessions{m: map[string]*idSession{}} }

// acquire returns sid's map (made if create, else nil when there is none)
// with a reference, given back with release.
func (s *idSessions) acquire(sid string, create bool) *idMap {
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.m[sid]
	if e == nil {
		if !create {
			return nil
		}
		e = &idSession{ids: newIDMap()}
		s.m[sid] = e
	}
	e.refs++
	return e.ids
}

// register makes ids sid's map, with a reference.
func (s *idSessions) register(sid string, ids *idMap) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.m[sid] = &idSession{ids: ids, refs: 1}
}

// release gives back a reference; the last one frees the map and the ids
// it still holds (their answers can no longer go out).
func (s *idSessions) release(sid string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if e := s.m[sid]; e != nil {
		if e.refs--; e.refs <= 0 {
			delete(s.m, sid)
		}
	}
}

func (s *idSessions) len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.m)
}

// idHandler maps the ids of POSTed frames for next, a streamable handler
// or (legacy) the SSE handler.
type idHandler struct {
	next      http.Handler
	sessions  *idSessions
	legacy    bool // the SSE handler: POSTs name their stream's ?sessionid=, answers go out on it
	stateless bool // a streamable handler without sessions: each POST stands alone
}

func (h *idHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || r.Body == nil {
		h.next.ServeHTTP(w, r)
		return
	}
	if mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); mt != "application/json" {
		h.next.ServeHTTP(w, r)
		return
	}
	limit := int64(mcp.DefaultMaxRequestBodyBytes)
	data, err := io.ReadAll(io.LimitReader(r.Body, limit+1))
	if err != nil || int64(len(data)) > limit {
		// Too large or unreadable: the SDK says so, from what is left.
		r.Body = io.NopCloser(io.MultiReader(bytes.NewReader(data), r.Body))
		h.next.ServeHTTP(w, r)
		return
	}
	var ids *idMap
	switch sid := r.Header.Get("Mcp-Session-Id"); {
	case h.legacy:
		sid = r.URL.Query().Get("sessionid")
		if ids = h.sessions.acquire(sid, false); ids == nil {
			// No such stream: the SDK says so (frames are still checked).
			if _, _, bad := newIDMap().inbound(data); bad != nil {
				writeFrameError(w, bad)
				return
			}
			r.Body = io.NopCloser(bytes.NewReader(data))
			h.next.ServeHTTP(w, r)
			return
		}
		defer h.sessions.release(sid)
	case sid != "" && !h.stateless:
		// The SDK gives a session id in answer to initialize: a POST that
		// has one is on an initialized session.
		ids = h.sessions.acquire(sid, true)
		ids.setInitialized()
		defer h.sessions.release(sid)
	default:
		ids = newIDMap()
		if h.stateless { // every stateless POST is served as initialized
			ids.setInitialized()
		}
	}
	body, toks, bad := mapBody(ids, data)
	if bad != nil {
		ids.release(toks)
		writeFrameError(w, bad)
		return
	}
	if body == nil { // nothing left for the SDK (a dropped response)
		w.WriteHeader(http.StatusAccepted)
		return
	}
	r.Body, r.ContentLength = io.NopCloser(bytes.NewReader(body)), int64(len(body))
	if h.legacy {
		// Accepted calls are answered on the stream, which frees their
		// tokens; the SDK refusing the POST frees them here.
		sw := &frontdoor.Recorder{ResponseWriter: w}
		h.next.ServeHTTP(sw, r)
		if sw.Status != http.StatusAccepted {
			ids.release(toks)
		}
		return
	}
	aw := &answerWriter{ResponseWriter: w, ids: ids}
	h.next.ServeHTTP(aw, r)
	aw.finish()
	ids.release(toks) // calls left unanswered when the POST ended
}

func writeFrameError(w http.ResponseWriter, bad *frameError) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusBadRequest)
	_, _ = w.Write(errorFrame(bad.id, bad.err))
}

// mapBody maps a POSTed body, one frame or a batch: the body the SDK
// reads (nil when nothing is left), the tokens it holds, or the error of
// the first frame refused.
func mapBody(ids *idMap, data []byte) (body []byte, toks []int64, bad *frameError) {
	trimmed := bytes.TrimSpace(data)
	if len(trimmed) == 0 || trimmed[0] != '[' || !withinDepth(trimmed, maxFrameDepth) {
		msg, tok, bad := ids.inbound(trimmed)
		if bad != nil || msg == nil {
			return nil, nil, bad
		}
		if tok != 0 {
			toks = append(toks, tok)
		}
		body, err := jsonrpc.EncodeMessage(msg)
		if err != nil {
			return nil, toks, refuse(nil, jsonrpc.CodeInternalError, "internal error: %v", err)
		}
		return body, toks, nil
	}
	var batch []json.RawMessage
	if json.Unmarshal(trimmed, &batch) != nil || len(batch) == 0 {
		return data, nil, nil // the SDK answers
	}
	out := make([]json.RawMessage, 0, len(batch))
	for _, el := range batch {
		msg, tok, bad := ids.inbound(el)
		if bad != nil {
			return nil, toks, bad
		}
		if msg == nil {
			continue
		}
		if tok != 0 {
			toks = append(toks, tok)
		}
		b, err := jsonrpc.EncodeMessage(msg)
		if err != nil {
			return nil, toks, refuse(nil, jsonrpc.CodeInternalError, "internal error: %v", err)
		}
		out = append(out, b)
	}
	if len(out) == 0 {
		return nil, toks, nil
	}
	body, err := json.Marshal(out)
	if err != nil {
		return nil, toks, refuse(nil, jsonrpc.CodeInternalError, "internal error: %v", err)
	}
	return body, toks, nil
}

// restoreEvent gives an SSE event's message (its one "data: " line, as
// the SDK writes it) the client's id back; other events pass unchanged.
func restoreEvent(ids *idMap, ev []byte) []byte {
	i := bytes.Index(ev, []byte("data: "))
	if i < 0 || (i > 0 && ev[i-1] != '\n') {
		return ev
	}
	start := i + len("data: ")
	end := bytes.IndexByte(ev[start:], '\n')
	if end < 0 {
		end = len(ev)
	} else {
		end += start
	}
	data := ev[start:end]
	restored := ids.restore(data)
	if bytes.Equal(restored, data) {
		return ev
	}
	out := make([]byte, 0, len(ev)-len(data)+len(restored))
	out = append(out, ev[:start]...)
	out = append(out, restored...)
	return append(out, ev[end:]...)
}

// restoreBody gives a JSON answer body (one message or a batch) the
// client's ids back.
func restoreBody(ids *idMap, body []byte) []byte {
	trimmed := bytes.TrimSpace(body)
	if len(trimmed) == 0 || trimmed[0] != '[' {
		return ids.restore(trimmed)
	}
	var batch []json.RawMessage
	if json.Unmarshal(trimmed, &batch) != nil {
		return body
	}
	for i, m := range batch {
		batch[i] = ids.restore(m)
	}
	out, err := json.Marshal(batch)
	if err != nil {
		return body
	}
	return out
}

// answerWriter is a streamable POST's response with the client's ids
// restored: SSE events as each completes (the SDK writes one event per
// Write), a JSON body when the handler ends (the SDK writes it once, at
// the end). It needs no lock of its own: the SDK writes a POST's
// response under that stream's lock, or from the handler's goroutine, and
// finish runs after the handler has returned.
type answerWriter struct {
	http.ResponseWriter
	ids     *idMap
	mode    byte   // 0 not known yet, 's' SSE, 'j' JSON, 'o' other (passed through)
	pending []byte // SSE: an event not complete yet; JSON: the body so far
}

func (a *answerWriter) decide() {
	if a.mode != 0 {
		return
	}
	switch mt, _, _ := mime.ParseMediaType(a.Header().Get("Content-Type")); mt {
	case "text/event-stream":
		a.mode = 's'
	case "application/json":
		a.mode = 'j'
	default:
		a.mode = 'o'
	}
}

func (a *answerWriter) WriteHeader(code int) {
	a.decide()
	a.ResponseWriter.WriteHeader(code)
}

func (a *answerWriter) Write(p []byte) (int, error) {
	a.decide()
	switch a.mode {
	case 'j':
		a.pending = append(a.pending, p...)
		return len(p), nil
	case 's':
		a.pending = append(a.pending, p...)
		for {
			i := bytes.Index(a.pending, []byte("\n\n"))
			if i < 0 {
				break
			}
			if _, err := a.ResponseWriter.Write(restoreEvent(a.ids, a.pending[:i+2])); err != nil {
				return 0, err
			}
			a.pending = a.pending[i+2:]
		}
		if len(a.pending) == 0 {
			a.pending = nil
		}
		return len(p), nil
	}
	return a.ResponseWriter.Write(p)
}

// Flush flushes what went out; a JSON body goes out whole, at finish.
func (a *answerWriter) Flush() {
	if a.mode != 'j' {
		_ = http.NewResponseController(a.ResponseWriter).Flush()
	}
}

func (a *answerWriter) Unwrap() http.ResponseWriter { return a.ResponseWriter }

// finish writes what is held: the JSON body, or the tail of a stream.
func (a *answerWriter) finish() {
	switch {
	case len(a.pending) == 0:
	case a.mode == 'j':
		_, _ = a.ResponseWriter.Write(restoreBody(a.ids, a.pending))
	default:
		_, _ = a.ResponseWriter.Write(a.pending)
	}
	a.pending = nil
}

// sseStreamIDs maps the answers of one legacy SSE stream: the map is
// registered under the stream's session id when the SDK writes the
// endpoint event (it makes the id itself), and freed when the stream ends.
type sseStreamIDs struct {
	sessions *idSessions
	ids      *idMap
	sid      atomic.Pointer[string] // set once, by the endpoint event
}

// rewrite is the sseWriter's hook: it sees each event the SDK writes.
func (s *sseStreamIDs) rewrite(ev []byte) []byte {
	if s.sid.Load() == nil && bytes.HasPrefix(ev, []byte("event: endpoint\n")) {
		if i := bytes.Index(ev, []byte("data: ")); i >= 0 {
			line, _, _ := bytes.Cut(ev[i+len("data: "):], []byte("\n"))
			if u, err := url.Parse(string(line)); err == nil {
				if sid := u.Query().Get("sessionid"); sid != "" {
					s.sessions.register(sid, s.ids)
					s.sid.Store(&sid)
				}
			}
		}
		return ev
	}
	return restoreEvent(s.ids, ev)
}

// close frees the stream's map.
func (s *sseStreamIDs) close() {
	if sid := s.sid.Load(); sid != nil {
		s.sessions.release(*sid)
	}
}
