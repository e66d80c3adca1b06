package service

import (
	"context"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/codecage/codecage/internal/bounded"
	"github.com/codecage/codecage/internal/config"
	"github.com/codecage/codecage/internal/envstore"
	"github.com/codecage/codecage/internal/fleet"
	"github.com/codecage/codecage/internal/session"
)

// EventCommand is the event kind of run_command.
const EventCommand = "command"

// CommandRequest asks to run a command line under /bin/sh -c, or a
// program with its arguments.
type CommandRequest struct {
	Command string
	// Argv, instead of Command, runs a program with these arguments (no
	// shell of ours between): Argv[0] is a name or path of an allowed
	// program.
	Argv []string `json:",omitempty"`
	// WorkingDir is relative to the workspace ("" is its root).
	WorkingDir string
	// Env adds variables (not loader or interpreter ones).
	Env map[string]string
	// Timeout is the wall-clock limit (0: the default).
	Timeout time.Duration
	// SessionID runs the command in that session's workspace; empty runs
	// it in a fresh, empty one.
	SessionID string
	Owner     string
	// OnOutput: as Request's.
	OnOutput func(stream, line string) `json:"-"`
	// OnStart, if set, is called once the command's sandbox runs it (a
	// refused request never calls it).
	OnStart func() `json:"-"`
	// Stdin keeps the command's stdin open for OnInput's CommandInput;
	// without it (and without Terminal) the command reads an empty stdin.
	Stdin bool `json:",omitempty"`
	// Terminal runs the command on a pseudo-terminal of this size (its
	// stdin, stdout and stderr, and its controlling terminal); what it
	// shows comes as stdout, passed on as it comes.
	Terminal *TerminalSize `json:",omitempty"`
	// OnInput, with Stdin or Terminal, is given the command's input just
	// before OnStart.
	OnInput func(*CommandInput) `json:"-"`
	// Input, when not empty, is written to the command's stdin, which is
	// then closed: Stdin in one piece, for a caller with no stream of
	// input (it travels with a request forwarded to another replica).
	Input string `json:",omitempty"`

	// daemon, set only by envstart.go, runs an environment's start
	// command: it lives as long as its session, and its output goes to
	// this bounded tail instead of the result.
	daemon *tailWriter
}

// TerminalSize is a terminal's size in characters.
type TerminalSize struct {
	Cols, Rows int
}

// interactive reports whether the command is given input.
func (req CommandRequest) interactive() bool { return req.Stdin || req.Terminal != nil }

// CommandResult is run_command's result: the seed's fields, and those of an
// execution's result that apply.
type CommandResult struct {
	Success       bool         `json:"success"`
	ExecutionID   string       `json:"execution_id"`
	ExitCode      int          `json:"exit_code"`
	Stdout        string       `json:"stdout"`
	Stderr        string       `json:"stderr"`
	ExecutionTime float64      `json:"execution_time"`
	TimedOut      bool         `json:"timed_out"`
	Error         *string      `json:"error"`
	OOMKilled     bool         `json:"oom_killed"`
	Truncated     bool         `json:"truncated"`
	Limit         *string      `json:"limit"`
	Resources     Resources    `json:"resources"`
	Backend       string       `json:"backend"`
	Isolation     fleet.Layers `json:"isolation"`

	// OutputDropped: as Result's.
	OutputDropped *OutputDropped `json:"output_dropped"`
}

// LimitCanceled is CommandResult.Limit of a command ended before its
// end: by its caller, or with its session.
const LimitCanceled = string(fleet.LimitCanceled)

// commandSet is the resolved minimal root of the command jail, computed
// once: it depends only on the operator's list.
type commandSet struct {
	once     sync.Once
	programs *fleet.Programs
	err      error
}

// dataFor are files some programs read besides their libraries.
var dataFor = map[string][]string{
	"file": {"/usr/lib/file/magic.mgc", "/usr/share/misc/magic.mgc", "/etc/magic"},
}

// commandPrograms are the programs commands may run: the host's, or
// those of environment e's root.
func (s *Service) commandPrograms(e envstore.Env) (*fleet.Programs, error) {
	if e.RootDir != "" {
		return s.envPrograms.get(e, func() (*fleet.Programs, error) {
			names, data := s.commandNeeds()
			if slices.Contains(s.cfg.AllowedCommands, "python3") {
				data = append(data, envPythonData(e)...)
			}
			p, err := fleet.ResolveProgramsIn(e.RootDir, names, presentIn(e.RootDir, data))
			if err == nil {
				s.aliasPython(p)
			}
			return p, err
		})
	}
	s.commands.once.Do(func() {
		names, data := s.commandNeeds()
		if dir := pythonStdlib(s.cfg.AllowedCommands); dir != "" {
			data = append(data, dir)
		}
		s.commands.programs, s.commands.err = fleet.ResolvePrograms(names, presentIn("", data))
		if s.commands.err == nil {
			s.aliasPython(s.commands.programs)
		}
	})
	return s.commands.programs, s.commands.err
}

// commandNeeds are the programs commands may run (the shell and
// SANDBOX_ALLOWED_COMMANDS) and the data files some of them read.
func (s *Service) commandNeeds() (names, data []string) {
	names = append([]string{"sh"}, s.cfg.AllowedCommands...)
	for _, n := range names {
		data = append(data, dataFor[n]...)
	}
	// The locale, and the terminal descriptions a program on a
	// terminal reads (bash's line editing, tput).
	data = append(data, "/usr/lib/locale/C.utf8", "/lib/terminfo", "/usr/share/terminfo")
	return names, data
}

// aliasPython: scripts and agents say python (E2B's images have it); it
// is the python3 already allowed.
func (s *Service) aliasPython(p *fleet.Programs) {
	if slices.Contains(s.cfg.AllowedCommands, "python3") {
		p.Alias("python", "python3")
	}
}

// presentIn are the paths of data that exist in root ("": the host's),
// looked up without following a symlink out of it.
func presentIn(root string, data []string) []string {
	var out []string
	for _, d := range data {
		if root == "" {
			if _, err := os.Stat(d); err == nil {
				out = append(out, d)
			}
		} else if _, err := lstatIn(root, d); err == nil {
			out = append(out, d)
		}
	}
	return out
}

// envPythonData are the directories an environment's python3 reads, as
// its root lays them out: the standard library beside its prefix
// (/usr/bin/python3 -> /usr/lib/python3.11; /usr/local/bin/python3 ->
// /usr/local/lib/python3.12, whose site-packages an image's pip filled)
// and Debian's package directories. The image's packages are what it is
// for; presentIn keeps those that exist.
func envPythonData(e envstore.Env) []string {
	major, minor, ok := strings.Cut(e.PythonVersion, ".")
	if !ok || e.Python == "" {
		return nil
	}
	minor, _, _ = strings.Cut(minor, ".")
	v := "python" + major + "." + minor
	prefix := path.Dir(path.Dir(e.Python))
	return []string{path.Join(prefix, "lib", v), "/usr/lib/python3/dist-packages", "/usr/local/lib/" + v + "/dist-packages"}
}

// pythonStdlib is the standard library of an allowed python3.
func pythonStdlib(commands []string) string {
	for _, c := range commands {
		if c != "python3" && !strings.HasPrefix(c, "python3.") {
			continue
		}
		for _, dir := range fleet.ProgramSearchPath {
			real, err := filepath.EvalSymlinks(filepath.Join(dir, c))
			if err == nil {
				lib := "/usr/lib/" + filepath.Base(real) // /usr/bin/python3.11 -> /usr/lib/python3.11
				if _, err := os.Stat(lib); err == nil {
					return lib
				}
			}
		}
	}
	return ""
}

var envName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// commandLine is how a request shows in events and logs.
func commandLine(req CommandRequest) string {
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

// checkCommand validates a request before anything starts; home is the
// workspace's place in the sandbox, env the session's variables.
func (s *Service) checkCommand(req CommandRequest, home string, sessionEnv map[string]string) (time.Duration, []string, string, error) {
	bad := func(format string, args ...any) (time.Duration, []string, string, error) {
		return 0, nil, "", fmt.Errorf("%w: "+format, append([]any{ErrInvalidRequest}, args...)...)
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
	if int64(size) > s.cfg.MaxCodeSize {
		return bad("command is %d bytes, the limit is %d", size, s.cfg.MaxCodeSize)
	}
	if !utf8.ValidString(req.Command) || strings.ContainsRune(req.Command, 0) {
		return bad("command must be UTF-8 text without NUL bytes")
	}
	timeout := req.Timeout
	if timeout < 0 || timeout > s.cfg.MaxCommandTime {
		return bad("timeout %s is out of range (at most %s, SANDBOX_MAX_COMMAND_TIMEOUT)", timeout, s.cfg.MaxCommandTime)
	}
	if timeout == 0 {
		timeout = s.cfg.CommandTimeout
	}
	dir := home
	if req.WorkingDir != "" && req.WorkingDir != "/" && req.WorkingDir != "." {
		rel, err := workspacePath(req.WorkingDir, home)
		if err != nil {
			return bad("working_dir %s must be a directory inside the workspace (%s)", Quote(req.WorkingDir), home)
		}
		if rel != "." {
			dir = home + "/" + rel
		}
	}
	if err := checkEnv(req.Env); err != nil {
		return 0, nil, "", err
	}
	vars := map[string]string{"PATH": "/usr/bin:/bin", "HOME": home, "USER": fleet.UserOf(home), "LANG": "C.UTF-8", "TERM": "dumb", "TMPDIR": "/tmp"}
	if req.Terminal != nil {
		if _, err := terminalSize(req.Terminal.Cols, req.Terminal.Rows); err != nil {
			return 0, nil, "", err
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
		return 0, nil, "", err
	}
	return timeout, env, dir, nil
}

// checkEnv refuses environment variables a caller may not set: bad
// names, loader and interpreter variables, values that are not text.
func checkEnv(env map[string]string) error {
	if len(env) == 0 {
		return nil // every run's case: nothing to sort
	}
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: "+format, append([]any{ErrInvalidRequest}, args...)...)
	}
	if len(env) > 64 {
		return bad("at most 64 environment variables")
	}
	for _, k := range sortedKeys(env) {
		v := env[k]
		switch {
		case !envName.MatchString(k):
			return bad("environment variable name %s is not valid", Quote(k))
		case strings.HasPrefix(k, "LD_") || strings.HasPrefix(k, "PYTHON"):
			return bad("environment variable %s is not allowed (loader and interpreter variables, LD_* and PYTHON*, are refused)", Quote(k))
		case strings.ContainsRune(v, 0) || !utf8.ValidString(v) || len(v) > 32<<10:
			return bad("environment variable %s: the value must be UTF-8 text without NUL, at most 32 KiB", k)
		}
	}
	return nil
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

// RunCommand runs a command line in the command jail: the same namespaces,
// limits, seccomp and teardown as a Python run, on a root that holds only
// the allowed programs (the kernel refuses to execute anything else). In a
// gVisor session, or with SANDBOX_ISOLATION=gvisor, that root is built
// under gVisor where its kernel refuses execution from the noexec
// workspace and /tmp as Linux does (it has no Landlock): see
// commandBackend.
func (s *Service) RunCommand(ctx context.Context, req CommandRequest) (*CommandResult, error) {
	sink := newOutputSink(req.OnOutput)
	req.OnOutput = sink.onOutput()
	res, err := s.runCommandRequest(ctx, req)
	if dropped := sink.finish(drainWait); res != nil {
		res.OutputDropped = addDropped(res.OutputDropped, dropped)
	}
	return res, err
}

// runCommandRequest is RunCommand with its output behind a sink.
func (s *Service) runCommandRequest(ctx context.Context, req CommandRequest) (*CommandResult, error) {
	if req.interactive() && s.remote(req.SessionID) != "" && !s.sessions.Has(req.SessionID) {
		// Its input would have to follow it to the other replica.
		return nil, fmt.Errorf("%w: stdin and terminals are served by the replica that holds the session; connect to it", ErrInvalidRequest)
	}
	fwd := req
	fwd.OnOutput, fwd.OnStart, fwd.OnInput = nil, nil, nil
	return do(ctx, s, OpCommand, call[*CommandResult]{
		session: req.SessionID, peer: PeerCall{Owner: req.Owner, Command: &fwd}, onOutput: req.OnOutput,
		onForward: func() {
			if req.OnStart != nil {
				req.OnStart() // the other replica runs it: as good as started
			}
		},
		forwardAction: "session:" + req.SessionID,
		code:          commandLine(req),
		run:           func(ctx context.Context) (*CommandResult, error) { return s.runCommand(ctx, req) },
		success: func(res *CommandResult, took time.Duration) Event {
			ev := Event{Kind: EventCommand, ExecutionID: res.ExecutionID, Backend: res.Backend, Code: commandLine(req), Duration: took, Outcome: "success"}
			switch {
			case res.Limit != nil:
				ev.Outcome, ev.Limit = *res.Limit, *res.Limit
			case !res.Success:
				ev.Outcome = "error"
			}
			if res.Error != nil {
				ev.Detail = *res.Error
				if m := notAllowed.FindStringSubmatch(*res.Error); m != nil {
					ev.SecurityEvents = []string{"command_denied:" + m[1]}
				}
			}
			if req.SessionID != "" {
				ev.Action = "session:" + req.SessionID
			}
			return ev
		},
	})
}

func (s *Service) runCommand(ctx context.Context, req CommandRequest) (*CommandResult, error) {
	var se *session.Session
	var in session.Command // the session's workspace, uid and CPU time since its last request
	if req.SessionID != "" {
		var err error
		if se, err = s.session(req.SessionID, req.Owner); err != nil {
			return nil, err
		}
		// Beside the interpreter and the session's other commands, on the
		// same workspace, as processes of one machine.
		var done func()
		start := s.sessions.StartCommand
		if req.daemon != nil {
			start = s.sessions.StartDaemon
		}
		if ctx, in, done, err = start(ctx, se); err != nil {
			return nil, err
		}
		defer done()
	}
	home, sessionEnv := fleet.WorkspaceDir, map[string]string(nil)
	var env envstore.Env // a session's environment (commands alone: the host's root)
	if se != nil {
		env = se.Environment()
		home, sessionEnv = se.Home(), withEnvVars(env, se.Env())
	}
	timeout, cmdEnv, dir, err := s.checkCommand(req, home, sessionEnv)
	if err != nil {
		return nil, err
	}
	programs, err := s.commandPrograms(env)
	if err != nil {
		return nil, fmt.Errorf("%w: the command jail cannot be built: %v", ErrUnavailable, err)
	}
	backend := s.commandBackend(se)
	out := fleet.NewCollector(req.OnOutput)
	if req.interactive() {
		out = fleet.NewInteractiveCollector(req.OnOutput)
	}
	// The working directory is entered by the shell, so that a missing one
	// is the shell's ordinary error.
	argv := []string{"/bin/sh", "-c", `cd -- "$1" || exit 2; shift; exec /bin/sh -c "$1"`, "sh", dir, req.Command}
	if len(req.Argv) > 0 {
		argv = append([]string{"/bin/sh", "-c", `cd -- "$1" || exit 2; shift; exec "$@"`, "sh", dir}, req.Argv...)
	}
	work := fleet.Work{Kind: fleet.Command, ID: fleet.NewID(), Argv: argv, Env: cmdEnv, Home: home, Programs: programs,
		Root: env.RootDir, EnvLayer: env.LayerDir, Limits: s.caps().Command(timeout)}
	work.Stdout, work.Stderr = out.Writers()
	if req.daemon != nil {
		daemonWork(&work, req.daemon, s.cfg.SessionMaxLifetime)
	}
	work.Stdin = req.Stdin || req.Input != ""
	if req.Terminal != nil {
		size, _ := terminalSize(req.Terminal.Cols, req.Terminal.Rows) // checked above
		work.Terminal = &size
	}
	if se != nil {
		work.Workspace, work.HostUID, work.Tmp = in.Workspace, in.UID, in.Tmp
		work.LoopbackServers = se.Request().Servers
		if backend == fleet.Native {
			// One loopback per session, as in a VM: its interpreter's
			// and its other commands' servers are reached on 127.0.0.1.
			work.NetNS = in.NetNS
		}
	}
	spec := work.Spec()
	lease, err := s.fleet.Start(ctx, backend, spec)
	if err != nil {
		return nil, s.fleetError(ctx, err)
	}
	if se != nil {
		in.Attach(lease) // a pause of the session pauses it too
	}
	if req.OnInput != nil && req.interactive() {
		req.OnInput(&CommandInput{lease: lease, terminal: req.Terminal != nil})
	}
	if req.Input != "" && !req.interactive() {
		go feedInput(&CommandInput{lease: lease}, req.Input)
	}
	if req.OnStart != nil {
		req.OnStart()
	}
	exit := lease.WaitProgram()
	stderr := out.Stderr()
	if req.daemon != nil {
		stderr = req.daemon.String() // its last words, for commandError
	}
	r := &CommandResult{
		ExecutionID: spec.ID, ExitCode: exit.ExitCode,
		Stdout:        out.Stdout(),
		Stderr:        stderr,
		ExecutionTime: exit.Duration.Seconds(), TimedOut: exit.Limit == fleet.LimitTimeout,
		OOMKilled: exit.OOMKilled, Truncated: exit.Truncated,
		Resources: Resources{PeakMemoryBytes: exit.PeakMemoryBytes, CPUTimeSeconds: exit.CPUTime.Seconds(), IdleCPUSeconds: in.Idle.Seconds()},
		Backend:   backend, Isolation: layersOf(backend),
	}
	if exit.Limit != fleet.LimitNone {
		name := string(exit.Limit)
		r.Limit = &name
		msg := limitError(exit.Limit, spec.Limits.WithDefaults()).Message
		r.Error = &msg
	} else if msg := commandError(r, s.cfg.AllowedCommands, home); msg != "" {
		r.Error = &msg
	}
	r.Success = exit.Limit == fleet.LimitNone && r.ExitCode == 0
	return r, nil
}

// commandBackend is where a command runs: a gVisor session's commands run
// under gVisor too, as every run does with SANDBOX_ISOLATION=gvisor, so its
// kernel stays between them and the host's; but only with a runsc that
// refuses code from noexec mounts, on which the allow-list rests there
// (Debian's of 2022 maps it: its commands stay on the native jail).
func (s *Service) commandBackend(se *session.Session) string {
	gv := (se != nil && se.Backend() == fleet.GVisor) || (se == nil && s.cfg.Isolation == config.IsolationGVisor)
	if gv && fleet.ProbeGVisor(s.cfg.Runsc, s.cfg.GVisorPlatform).EnforcesNoexec {
		return fleet.GVisor
	}
	return fleet.Native
}

var (
	shNotFound  = regexp.MustCompile(`(?m)^(?:/bin/)?(?:ba)?sh: (?:line )?\d+: (?:exec: )?([^:\n]+): (?:command )?(?:not found|Permission denied)$`)
	notAllowed  = regexp.MustCompile(`^program "([^"]+)" is not allowed`)
	cannotEnter = regexp.MustCompile(`(?m)^(?:/bin/)?sh: \d+: cd: can't cd to (.*)$`)
)

// commandError explains a failure the shell reported: a program that is
// not there to run (not allowed), or a working directory that is missing.
func commandError(r *CommandResult, allowed []string, home string) string {
	if r.ExitCode == 127 || r.ExitCode == 126 {
		if m := shNotFound.FindStringSubmatch(r.Stderr); m != nil {
			// The shell's line is the sandbox's to write: quoted, capped.
			return fmt.Sprintf("program %q is not allowed or not installed (allowed: %s; SANDBOX_ALLOWED_COMMANDS)", bounded.String(m[1], bounded.QuoteMax), strings.Join(allowed, " "))
		}
	}
	if r.ExitCode == 2 {
		if m := cannotEnter.FindStringSubmatch(r.Stderr); m != nil {
			return "working_dir does not exist: " + bounded.String(strings.TrimPrefix(m[1], home+"/"), bounded.QuoteMax)
		}
	}
	if r.ExitCode != 0 {
		return fmt.Sprintf("the command exited with status %d", r.ExitCode)
	}
	return ""
}

// CommandsInfo lists what run_command may run on this host.
func (s *Service) CommandsInfo() (allowed, missing []string) {
	p, err := s.commandPrograms(envstore.Env{})
	if err != nil || p == nil {
		return s.cfg.AllowedCommands, nil
	}
	for _, c := range s.cfg.AllowedCommands {
		if _, ok := p.Names[c]; ok {
			allowed = append(allowed, c)
		}
	}
	for name := range p.Aliases {
		if !slices.Contains(allowed, name) {
			allowed = append(allowed, name)
		}
	}
	return allowed, p.Missing
}
