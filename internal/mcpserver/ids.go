package mcpserver

import (
	"encoding/json"
	"errors"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
)

// idMap gives every inbound call an id of the connection's own (a small
// integer, which the SDK holds exactly) and remembers the id the client
// sent, byte for byte, to put back on the answer: the SDK decodes numeric
// ids through float64 (2^53+1 came back as 2^53, 2^70 as -2^63, 1.5 as 1).
type idMap struct {
	mu     sync.Mutex
	next   int64
	byTok  map[int64]sentID
	latest map[string]int64 // raw id -> its newest token, for notifications/cancelled
	// initialized: an initialize call was answered without error; a code-0
	// error before it is the SDK refusing a call made too early.
	initialized bool
}

type sentID struct {
	raw    json.RawMessage
	method string
}

func newIDMap() *idMap {
	return &idMap{byTok: map[int64]sentID{}, latest: map[string]int64{}}
}

// add records a call's raw id and returns the id the SDK sees.
func (m *idMap) add(raw json.RawMessage, method string) jsonrpc.ID {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.next++
	m.byTok[m.next] = sentID{raw: append(json.RawMessage(nil), raw...), method: method}
	m.latest[string(raw)] = m.next
	id, _ := jsonrpc.MakeID(float64(m.next))
	return id
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
	s, ok := m.byTok[tok]
	if ok {
		delete(m.byTok, tok)
		if m.latest[string(s.raw)] == tok {
			delete(m.latest, string(s.raw))
		}
	}
	return s, ok
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
			m.mu.Lock()
			m.initialized = true
			m.mu.Unlock()
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
