package service

import (
	"context"
	"encoding/json"
	"strings"
	"time"

	"github.com/codecage/codecage/internal/bounded"
	"github.com/codecage/codecage/internal/fleet"
)

// The calls a cell's magics make to the supervisor, as tool calls with
// names no upstream tool can have ("server.tool" is an identifier pair):
// "!cmd" and "%%bash" run a shell command, "%pip install" installs a
// package. Each goes through the same path and policy as the request it
// stands for (RunCommand, PipInstall): the harness runs no program itself.
const (
	magicShell = "!shell"
	magicPip   = "!pip"
)

// magicCaller answers the magics of a run in session se (an empty id: a
// run without a session, whose magics are refused), and hands every other
// call to tools (nil: none).
func (s *Service) magicCaller(ctx context.Context, sessionID, owner, home string, timeout time.Duration, tools fleet.ToolHandler) fleet.ToolHandler {
	return func(c *fleet.ToolCall) fleet.ToolResult {
		if c.Tool != magicShell && c.Tool != magicPip {
			if tools == nil {
				return fleet.ToolResult{ID: c.ID, Error: "this run has no tools"}
			}
			return tools(c)
		}
		res := fleet.ToolResult{ID: c.ID}
		if sessionID == "" {
			res.Error = "shell commands (!cmd) and %pip run only in a session: they share its workspace"
			return res
		}
		var args struct {
			Command string `json:"command"`
			Cwd     string `json:"cwd"`
			Package string `json:"package"`
			Version string `json:"version"`
		}
		if json.Unmarshal(c.Args, &args) != nil {
			res.Error = "the magic's arguments are not a JSON object"
			return res
		}
		var value any
		var err error
		if c.Tool == magicShell {
			value, err = s.magicShell(ctx, sessionID, owner, home, timeout, args.Command, args.Cwd)
		} else {
			value, err = s.PipInstall(ctx, InstallRequest{Package: args.Package, Version: args.Version, SessionID: sessionID, Owner: owner, inRun: true})
		}
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
}

// maxMagicError bounds an error message sent back to the code.
const maxMagicError = 4 << 10

// magicShell runs a "!cmd" line as commands.run would, in the session's
// workspace, from the interpreter's directory when that is inside it.
// A program the policy does not allow is an error of the call (the code
// gets an exception), not an output.
func (s *Service) magicShell(ctx context.Context, sessionID, owner, home string, timeout time.Duration, command, cwd string) (any, error) {
	dir := ""
	if cwd == home || strings.HasPrefix(cwd, home+"/") {
		dir = cwd
	}
	res, err := s.RunCommand(ctx, CommandRequest{Command: command, WorkingDir: dir, SessionID: sessionID, Owner: owner, Timeout: min(timeout, s.cfg.MaxCommandTime)})
	if err != nil {
		return nil, err
	}
	if res.Error != nil && notAllowed.MatchString(*res.Error) {
		return nil, errorText(*res.Error)
	}
	stderr := res.Stderr
	if res.Error != nil && res.Limit != nil {
		stderr += *res.Error + "\n" // a limit ended it: said where the output is
	}
	return map[string]any{"stdout": res.Stdout, "stderr": stderr, "exit_code": res.ExitCode}, nil
}

type errorText string

func (e errorText) Error() string { return string(e) }
