package commands

import (
	"fmt"
	"maps"
	"sort"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/codecage/codecage/internal/bounded"
	"github.com/codecage/codecage/internal/envstore"
	"github.com/codecage/codecage/internal/fleet"
	"github.com/codecage/codecage/internal/service/check"
	"github.com/codecage/codecage/internal/service/errdefs"
)

// Line is how a request shows in events and logs.
func Line(req CommandRequest) string {
	if len(req.Argv) == 0 {
		return req.Command
	}
	quoted := make([]string, len(req.Argv))
	for i, a := range req.Argv {
		quoted[i] = a
		if a == "" || strings.ContainsAny(a, " \t\n'\"\\$`;&|<>()*?[]#~") {
			quoted[i] = ShellQuote(a)
		}
	}
	return strings.Join(quoted, " ")
}

// ShellQuote is s as one word for sh: in single quotes, its own quotes
// closed and escaped.
func ShellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// checked is a request as check accepts it: its time limit, environment
// and working directory in the sandbox.
type checked struct {
	timeout time.Duration
	env     []string
	dir     string
}

// check validates a request before anything starts; home is the
// workspace's place in the sandbox, env the session's variables. A
// machine's command may run as long as its session (no timeout: that
// long): a bound on its processes guards it, not a time.
func (c *Commands) check(req CommandRequest, home string, sessionEnv map[string]string, machine bool) (checked, error) {
	bad := func(format string, args ...any) (checked, error) {
		return checked{}, fmt.Errorf("%w: "+format, append([]any{errdefs.ErrInvalidRequest}, args...)...)
	}
	switch {
	case len(req.Argv) > 0 && req.Command != "":
		return bad("give command or argv, not both")
	case len(req.Argv) > 1024:
		return bad("at most 1024 arguments")
	case len(req.Argv) > 0 && req.Argv[0] == "":
		return bad("argv[0] is empty")
	case len(req.Argv) == 0 && strings.TrimSpace(req.Command) == "":
		return bad("command is empty")
	}
	size := len(req.Command)
	for _, a := range req.Argv {
		size += len(a) + 1
		if !utf8.ValidString(a) || strings.ContainsRune(a, 0) {
			return bad("arguments must be UTF-8 text without NUL bytes")
		}
	}
	if int64(size) > c.cfg.MaxCodeSize {
		return bad("command is %d bytes, the limit is %d", size, c.cfg.MaxCodeSize)
	}
	if !utf8.ValidString(req.Command) || strings.ContainsRune(req.Command, 0) {
		return bad("command must be UTF-8 text without NUL bytes")
	}
	timeout := req.Timeout
	bound, def, setting := c.cfg.MaxCommandTime, c.cfg.CommandTimeout, "SANDBOX_MAX_COMMAND_TIMEOUT"
	if machine {
		bound, def, setting = c.cfg.SessionMaxLifetime, c.cfg.SessionMaxLifetime, "a machine session's command: SANDBOX_SESSION_MAX_LIFETIME"
	}
	if req.TimeoutCeiling && timeout > bound {
		timeout = bound
	}
	if timeout < 0 || timeout > bound {
		return bad("timeout %s is out of range (at most %s, %s)", timeout, bound, setting)
	}
	if timeout == 0 {
		timeout = def
	}
	dir := home
	if req.WorkingDir != "" && req.WorkingDir != "/" && req.WorkingDir != "." {
		rel, err := c.o.WorkspacePath(req.WorkingDir, home)
		if err != nil {
			return bad("working_dir %s must be a directory inside the workspace (%s)", bounded.Quote(req.WorkingDir), home)
		}
		if rel != "." {
			dir = home + "/" + rel
		}
	}
	env, err := commandEnv(req, home, sessionEnv)
	if err != nil {
		return checked{}, err
	}
	return checked{timeout: timeout, env: env, dir: dir}, nil
}

// commandEnv is the command's environment: the sandbox's defaults, the
// session's variables, then the request's, each checked.
func commandEnv(req CommandRequest, home string, sessionEnv map[string]string) ([]string, error) {
	if err := check.Env(req.Env); err != nil {
		return nil, err
	}
	vars := map[string]string{"PATH": "/usr/bin:/bin", "HOME": home, "USER": fleet.UserOf(home), "LANG": "C.UTF-8", "TERM": "dumb", "TMPDIR": "/tmp"}
	if req.Terminal != nil {
		if _, err := terminalSize(req.Terminal.Cols, req.Terminal.Rows); err != nil {
			return nil, err
		}
		vars["TERM"] = "xterm-256color"
	}
	for _, m := range []map[string]string{sessionEnv, req.Env} {
		for k, v := range m {
			vars[k] = v
		}
	}
	env := make([]string, 0, len(vars))
	for _, k := range sortedKeys(vars) {
		env = append(env, k+"="+vars[k])
	}
	if err := checkArgList(req.Command, req.Argv, env); err != nil {
		return nil, err
	}
	return env, nil
}

// sortedKeys returns m's keys in order.
func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// withEnvVars are environment e's variables with vars (a session's own)
// over them.
func withEnvVars(e envstore.Env, vars map[string]string) map[string]string {
	if len(e.Vars) == 0 {
		return vars
	}
	out := maps.Clone(e.Vars)
	maps.Copy(out, vars)
	return out
}
