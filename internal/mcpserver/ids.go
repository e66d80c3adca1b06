package mcpserver

import (
	"bytes"
	"encoding/json"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
)

// idMap gives every inbound call an id of the server's own (a small
// integer, which the SDK holds exactly) and remembers the id the client
// sent, byte for byte, to put back on the answer: the SDK decodes numeric
// ids through float64 (2^53+1 came back as 2^53, 2^70 as -2^63, 1.5 as 1).
// One map serves a stdio connection, a legacy SSE stream, or the POSTs in
// flight of one streamable session; every transport maps frames through
// inbound and answers through restore (or answer and encodeAnswer).
type idMap struct {
	// mu guards everything below; it is a leaf lock (nothing else is
	// taken while it is held).
	mu     sync.Mutex
	byTok  map[int64]sentID
	latest map[string]int64 // raw id -> its newest token, for notifications/cancelled
	// initialized: an initialize call was answered without error (or the
	// transport says the session is initialized); a code-0 error before it
	// is the SDK refusing a call made too early.
	initialized bool
}

type sentID struct {
	raw    json.RawMessage
	method string
}

// MaxOutstandingIDs bounds the calls of one session (stdio connection,
// SSE stream, streamable session) awaiting their answers: the next is
// refused with -32600 until one is answered.
var MaxOutstandingIDs = 1024

// tokens numbers calls for every map in the process, so a token is never
// reused, even by a map made again for the same streamable session (the
// SDK may still hold a finished call's id for a moment). 2^53 calls, where
// tokens would stop being exact, are out of reach.
var tokens atomic.Int64

func newIDMap() *idMap {
	return &idMap{byTok: map[int64]sentID{}, latest: map[string]int64{}}
}

// add records a call's raw id and returns the id the SDK sees, or an
// error frame when the session has MaxOutstandingIDs calls unanswered.
func (m *idMap) add(raw json.RawMessage, method string) (jsonrpc.ID, *frameError) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.byTok) >= MaxOutstandingIDs {
		return jsonrpc.ID{}, refuse(raw, jsonrpc.CodeInvalidRequest,
			"invalid request: %d calls of this session already await their answers (the limit); wait for one before sending more", len(m.byTok))
	}
	tok := tokens.Add(1)
	m.byTok[tok] = sentID{raw: append(json.RawMessage(nil), raw...), method: method}
	m.latest[string(raw)] = tok
	id, _ := jsonrpc.MakeID(float64(tok))
	return id, nil
}

// token is the id the SDK knows a call in flight by, from the client's.
func (m *idMap) token(raw json.RawMessage) (jsonrpc.ID, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	tok, ok := m.latest[string(raw)]
	if !ok {
		return jsonrpc.ID{}, false
	}
	id, _ := jsonrpc.MakeID(float64(tok))
	return id, true
}

// answer takes back the client's id for a response the SDK sends; ok is
// false for ids the map did not give.
func (m *idMap) answer(id jsonrpc.ID) (sentID, bool) {
	tok, isInt := id.Raw().(int64)
	if !isInt {
		return sentID{}, false
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.takeLocked(tok)
}

func (m *idMap) takeLocked(tok int64) (sentID, bool) {
	s, ok := m.byTok[tok]
	if ok {
		delete(m.byTok, tok)
		if m.latest[string(s.raw)] == tok {
			delete(m.latest, string(s.raw))
		}
	}
	return s, ok
}

// release forgets tokens whose answers can no longer go out (the POST
// that carried them ended, or the SDK refused it).
func (m *idMap) release(toks []int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, tok := range toks {
		m.takeLocked(tok)
	}
}

func (m *idMap) setInitialized() {
	m.mu.Lock()
	m.initialized = true
	m.mu.Unlock()
}

// inbound checks one frame and maps it to the message the SDK reads: a
// call gets a token (tok, non-zero), a cancellation names the call's
// token. A refused frame returns the error to answer; a frame to drop
// returns neither.
func (m *idMap) inbound(data []byte) (msg jsonrpc.Message, tok int64, bad *frameError) {
	f, bad := checkFrame(data)
	if bad != nil {
		return nil, 0, bad
	}
	switch {
	case f.isResp:
		// An answer to one of the server's own requests: its ids are the
		// server's, small integers, so decoding keeps them. One that does
		// not decode answers nothing the server asked: it is dropped (msg
		// nil), as a response is never answered.
		msg, err := jsonrpc.DecodeMessage(data)
		if err != nil {
			return nil, 0, nil
		}
		return msg, 0, nil
	case f.isCall:
		id, bad := m.add(f.id, f.method)
		if bad != nil {
			return nil, 0, bad
		}
		return &jsonrpc.Request{ID: id, Method: f.method, Params: f.params}, id.Raw().(int64), nil
	case f.method == "notifications/cancelled":
		return &jsonrpc.Request{Method: f.method, Params: m.cancelParams(f.params)}, 0, nil
	}
	return &jsonrpc.Request{Method: f.method, Params: f.params}, 0, nil
}

// cancelParams points a cancellation at the call's token. One naming no
// call in flight is pointed at a string id, which no token is: it cancels
// nothing (rather than another call whose token equals the client's id).
func (m *idMap) cancelParams(params json.RawMessage) json.RawMessage {
	var p map[string]json.RawMessage
	if json.Unmarshal(params, &p) != nil || p["requestId"] == nil {
		return params // the SDK says what is wrong with it
	}
	if id, ok := m.token(p["requestId"]); ok {
		p["requestId"], _ = json.Marshal(id.Raw())
	} else {
		p["requestId"] = json.RawMessage(`"not in flight"`)
	}
	out, err := json.Marshal(p)
	if err != nil {
		return params
	}
	return out
}

// restore rewrites one outbound frame the SDK encoded: an answer to a
// mapped call gets the client's id back (and a JSON-RPC code for a
// code-0 error); anything else is returned as it is.
func (m *idMap) restore(data []byte) []byte {
	if out, ok := m.restoreResult(data); ok {
		return out
	}
	msg, err := jsonrpc.DecodeMessage(data)
	if err != nil {
		return data
	}
	resp, ok := msg.(*jsonrpc.Response)
	if !ok {
		return data
	}
	sent, ok := m.answer(resp.ID)
	if !ok {
		return data
	}
	return m.encodeAnswer(resp, sent)
}

// sdkResultPrefix starts every result the SDK encodes (its wire struct's
// field order: jsonrpc, id, then result).
var sdkResultPrefix = []byte(`{"jsonrpc":"2.0","id":`)

// restoreResult is restore's quick path for a result in the SDK's own
// encoding: the token's digits are replaced by the client's id without
// decoding the result (which may be megabytes of output).
func (m *idMap) restoreResult(data []byte) ([]byte, bool) {
	rest, ok := bytes.CutPrefix(data, sdkResultPrefix)
	if !ok {
		return nil, false
	}
	n := 0
	for n < len(rest) && n < 16 && rest[n] >= '0' && rest[n] <= '9' {
		n++
	}
	if n == 0 || !bytes.HasPrefix(rest[n:], []byte(`,"result":`)) {
		return nil, false
	}
	tok, err := strconv.ParseInt(string(rest[:n]), 10, 64)
	if err != nil {
		return nil, false
	}
	m.mu.Lock()
	sent, ok := m.takeLocked(tok)
	if ok && sent.method == "initialize" {
		m.initialized = true
	}
	m.mu.Unlock()
	if !ok {
		return nil, false
	}
	out := make([]byte, 0, len(data)-n+len(sent.raw))
	out = append(out, sdkResultPrefix...)
	out = append(out, sent.raw...)
	return append(out, rest[n:]...), true
}

// encodeAnswer is the wire form of resp with the client's own id. An
// error without a JSON-RPC code (the SDK gives code 0 to plain errors,
// such as a call before initialize) gets one: invalid request before the
// session is initialized, internal error after.
func (m *idMap) encodeAnswer(resp *jsonrpc.Response, sent sentID) []byte {
	var wire struct {
		JSONRPC string          `json:"jsonrpc"`
		ID      json.RawMessage `json:"id"`
		Result  json.RawMessage `json:"result,omitempty"`
		Error   *jsonrpc.Error  `json:"error,omitempty"`
	}
	wire.JSONRPC, wire.ID = "2.0", sent.raw
	if resp.Error != nil {
		wire.Error = m.wireError(resp.Error)
	} else {
		wire.Result = resp.Result
		if sent.method == "initialize" {
			m.setInitialized()
		}
	}
	b, err := json.Marshal(wire)
	if err != nil { // a result the SDK encoded is valid JSON; be safe anyway
		return errorFrame(sent.raw, &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: "internal error: the answer could not be encoded"})
	}
	return b
}

func (m *idMap) wireError(err error) *jsonrpc.Error {
	e := &jsonrpc.Error{Message: err.Error()}
	var we *jsonrpc.Error
	if errors.As(err, &we) {
		e.Code = we.Code
		if we == err {
			e.Data = we.Data
		}
	}
	if e.Code == 0 {
		m.mu.Lock()
		initialized := m.initialized
		m.mu.Unlock()
		if initialized {
			e.Code = jsonrpc.CodeInternalError
		} else {
			e.Code = jsonrpc.CodeInvalidRequest
			e.Message = "invalid request: " + e.Message + " (send initialize first)"
		}
	}
	return e
}
