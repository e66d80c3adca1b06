package mcpserver

import (
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
)

// The frame filter checks each inbound JSON-RPC frame before the SDK
// decodes it. The SDK ends a stdio session on the first frame it cannot
// decode (a batch, `}{`, binary bytes, a missing "jsonrpc", an object id)
// and turns numeric ids into int64 through float64; the filter answers
// such frames itself, with a JSON-RPC error, and the session goes on.

// maxFrameDepth bounds the nesting of a frame: MCP messages nest a few
// levels; a deeper frame is refused before any decoder recurses into it.
const maxFrameDepth = 256

// maxQuotedID bounds how much of a refused id an error message repeats.
const maxQuotedID = 64

// frame is a checked inbound message: its raw id (nil when absent), and
// its fields, still raw.
type frame struct {
	id     json.RawMessage // nil: no id; "null": an explicit null
	method string
	isCall bool // a request with an id (not a notification)
	isResp bool // a response to one of the server's own requests
	params json.RawMessage
}

type wireFrame struct {
	JSONRPC *string         `json:"jsonrpc"`
	ID      json.RawMessage `json:"id"`
	Method  json.RawMessage `json:"method"`
	Params  json.RawMessage `json:"params"`
	Result  json.RawMessage `json:"result"`
	Error   json.RawMessage `json:"error"`
}

// frameError is a frame refused: the error to answer and the id to answer
// it with ("null" when the frame's id is unknown or unusable).
type frameError struct {
	id  json.RawMessage
	err *jsonrpc.Error
}

func refuse(id json.RawMessage, code int64, format string, args ...any) *frameError {
	if id == nil {
		id = json.RawMessage("null")
	}
	return &frameError{id: id, err: &jsonrpc.Error{Code: code, Message: fmt.Sprintf(format, args...)}}
}

// checkFrame parses and checks one frame.
func checkFrame(data []byte) (*frame, *frameError) {
	data = bytes.TrimSpace(data)
	if len(data) == 0 {
		return nil, refuse(nil, jsonrpc.CodeInvalidRequest, "invalid request: empty frame")
	}
	if !withinDepth(data, maxFrameDepth) {
		return nil, refuse(nil, jsonrpc.CodeInvalidRequest, "invalid request: the frame nests deeper than %d levels", maxFrameDepth)
	}
	if !json.Valid(data) {
		return nil, refuse(nil, jsonrpc.CodeParseError, "parse error: the frame is not one JSON value")
	}
	switch data[0] {
	case '{':
	case '[':
		return nil, refuse(nil, jsonrpc.CodeInvalidRequest, "invalid request: JSON-RPC batches are not supported; send one message per frame")
	default:
		return nil, refuse(nil, jsonrpc.CodeInvalidRequest, "invalid request: a frame must be a JSON object")
	}
	var w wireFrame
	if err := json.Unmarshal(data, &w); err != nil {
		return nil, refuse(nil, jsonrpc.CodeInvalidRequest, "invalid request: %v", err)
	}
	f := &frame{id: w.ID, params: w.Params}
	// An id that is neither a string, a number nor null cannot be echoed
	// as an id: the error goes to id null.
	if w.ID != nil && !validID(w.ID) {
		return nil, refuse(nil, jsonrpc.CodeInvalidRequest, "invalid request: id %s is not a string, a number or null", quoteID(w.ID))
	}
	echo := w.ID
	if w.JSONRPC == nil || *w.JSONRPC != "2.0" {
		return nil, refuse(echo, jsonrpc.CodeInvalidRequest, `invalid request: "jsonrpc" must be "2.0"`)
	}
	switch {
	case w.Method != nil:
		if err := json.Unmarshal(w.Method, &f.method); err != nil {
			return nil, refuse(echo, jsonrpc.CodeInvalidRequest, `invalid request: "method" must be a string`)
		}
		if w.Params != nil && w.Params[0] != '{' && w.Params[0] != '[' && string(w.Params) != "null" {
			return nil, refuse(echo, jsonrpc.CodeInvalidRequest, `invalid request: "params" must be an object`)
		}
		f.isCall = w.ID != nil && string(w.ID) != "null"
	case w.Result != nil || w.Error != nil:
		if w.ID == nil || string(w.ID) == "null" {
			return nil, refuse(nil, jsonrpc.CodeInvalidRequest, "invalid request: a response without an id")
		}
		f.isResp = true
	default:
		return nil, refuse(echo, jsonrpc.CodeInvalidRequest, `invalid request: neither "method" nor "result"/"error"`)
	}
	return f, nil
}

func validID(id json.RawMessage) bool {
	switch c := id[0]; {
	case c == '"', c == '-', c >= '0' && c <= '9':
		return true
	}
	return string(id) == "null"
}

// quoteID is id for an error message, cut to maxQuotedID bytes.
func quoteID(id json.RawMessage) string {
	if len(id) > maxQuotedID {
		return string(id[:maxQuotedID]) + "..."
	}
	return string(id)
}

// withinDepth scans data for nesting deeper than limit, outside strings,
// without decoding it.
func withinDepth(data []byte, limit int) bool {
	depth, inString, escaped := 0, false, false
	for _, c := range data {
		if inString {
			switch {
			case escaped:
				escaped = false
			case c == '\\':
				escaped = true
			case c == '"':
				inString = false
			}
			continue
		}
		switch c {
		case '"':
			inString = true
		case '{', '[':
			depth++
			if depth > limit {
				return false
			}
		case '}', ']':
			depth--
		}
	}
	return true
}

// errorFrame is the wire form of a JSON-RPC error answer.
func errorFrame(id json.RawMessage, e *jsonrpc.Error) []byte {
	b, _ := json.Marshal(struct {
		JSONRPC string          `json:"jsonrpc"`
		ID      json.RawMessage `json:"id"`
		Error   *jsonrpc.Error  `json:"error"`
	}{"2.0", id, e})
	return b
}
