package codemode

import (
	"encoding/json"

	"github.com/codecage/codecage/internal/bounded"
	"github.com/codecage/codecage/internal/fleet"
)

// The calls a cell's magics make to the supervisor, as tool calls with
// names no upstream tool can have ("server.tool" is an identifier pair):
// "!cmd" and "%%bash" run a shell command, "%pip install" installs a
// package.
const (
	MagicShell = "!shell"
	MagicPip   = "!pip"
)

// IsMagic reports whether a call is a magic's, not an upstream tool's.
func IsMagic(c *fleet.ToolCall) bool { return c.Tool == MagicShell || c.Tool == MagicPip }

// MagicArgs are a magic call's arguments.
type MagicArgs struct {
	Command string `json:"command"`
	Cwd     string `json:"cwd"`
	Package string `json:"package"`
	Version string `json:"version"`
}

// maxMagicError bounds an error message sent back to the code.
const maxMagicError = 4 << 10

// AnswerMagic decodes magic call c's arguments, runs do on them, and
// turns what it returns into the call's result (an error as its message,
// capped).
func AnswerMagic(c *fleet.ToolCall, do func(MagicArgs) (any, error)) fleet.ToolResult {
	res := fleet.ToolResult{ID: c.ID}
	var args MagicArgs
	if json.Unmarshal(c.Args, &args) != nil {
		res.Error = "the magic's arguments are not a JSON object"
		return res
	}
	value, err := do(args)
	if err != nil {
		res.Error = bounded.String(err.Error(), maxMagicError)
		return res
	}
	b, err := json.Marshal(value)
	if err != nil {
		res.Error = "the magic's result is not JSON"
		return res
	}
	res.OK, res.Value = true, string(b)
	return res
}
