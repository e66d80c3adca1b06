package runtime

import (
	"encoding/json"
	"io"
)

// ToolHandler answers one tool call the code made (code mode).
type ToolHandler func(*ToolCall) ToolResult

// Answer is what came back after a request: the harness's reply, or, from
// a zygote's cell, the exit frame its init sends when the code ended
// without one.
type Answer struct {
	// Reply is the harness's reply; nil when none came.
	Reply *Reply
	// Exited reports that a cell's init said the code ended, with Code
	// (its exit status, or -1) and Signal.
	Exited       bool
	Code, Signal int
}

// Exchange sends req over rw and reads what comes back until the reply,
// or a cell's exit frame: the one conversation every kind of sandbox has
// with its harness. The code's tool calls are answered on the way (or
// refused when tools is nil). Any failure (the sandbox gone, a malformed
// or oversized frame) ends the exchange with what was read so far.
func Exchange(rw io.ReadWriter, req Request, tools ToolHandler) Answer {
	// The write fails at once if the program is already gone.
	if err := WriteRequest(rw, req); err != nil {
		return Answer{}
	}
	for {
		body, err := readFrame(rw, MaxReplyBytes)
		if err != nil {
			return Answer{}
		}
		// One decode whatever the frame: a reply's fields and a cell's
		// exit frame do not overlap.
		var f struct {
			Reply
			CellExit *struct {
				Exit   int `json:"exit"`
				Signal int `json:"signal"`
			} `json:"cell_exit"`
		}
		if json.Unmarshal(body, &f) != nil {
			return Answer{}
		}
		if f.CellExit != nil {
			return Answer{Exited: true, Code: f.CellExit.Exit, Signal: f.CellExit.Signal}
		}
		rep := f.Reply
		if rep.ToolCall == nil {
			return Answer{Reply: &rep}
		}
		res := ToolResult{ID: rep.ToolCall.ID, Error: "this run has no tools"}
		if tools != nil {
			res = tools(rep.ToolCall)
		}
		if WriteToolResult(rw, res) != nil {
			return Answer{}
		}
	}
}

// ReadRequest reads one request frame and returns its body undecoded (the
// harness decodes it in Python): for harness stand-ins in tests.
func ReadRequest(r io.Reader) ([]byte, error) { return readFrame(r, MaxFrameBytes) }

// WriteReply sends rep as one reply frame, as the harness does: for
// harness stand-ins in tests.
func WriteReply(w io.Writer, rep Reply) error {
	body, err := json.Marshal(rep)
	if err != nil {
		return err
	}
	return writeFrame(w, body)
}
