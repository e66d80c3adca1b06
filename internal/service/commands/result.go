package commands

import (
	"fmt"
	"regexp"
	"strings"
	"syscall"
	"time"

	"github.com/codecage/codecage/internal/bounded"
	"github.com/codecage/codecage/internal/fleet"
	"github.com/codecage/codecage/internal/service/report"
)

// result is a finished command's result.
func (c *Commands) result(spec fleet.Spec, exit fleet.Exit, stdout, stderr string, idle time.Duration, backend, home string, machine bool) *CommandResult {
	r := &CommandResult{
		ExecutionID: spec.ID, ExitCode: exit.ExitCode, Signal: exit.Signal,
		Stdout:        stdout,
		Stderr:        stderr,
		ExecutionTime: exit.Duration.Seconds(), TimedOut: exit.Limit == fleet.LimitTimeout,
		OOMKilled: exit.OOMKilled, Truncated: exit.Truncated,
		Resources: report.Resources{PeakMemoryBytes: exit.PeakMemoryBytes, CPUTimeSeconds: exit.CPUTime.Seconds(), IdleCPUSeconds: idle.Seconds()},
		Backend:   backend, Isolation: c.o.Layers(backend),
	}
	if exit.Limit != fleet.LimitNone {
		name := string(exit.Limit)
		r.Limit = &name
		msg := c.o.LimitMessage(exit.Limit, spec.Limits.WithDefaults())
		if exit.SandboxEnded {
			msg = sandboxEnded
		}
		r.Error = &msg
	} else if msg := commandError(r, c.cfg.AllowedCommands, home, machine); msg != "" {
		r.Error = &msg
	}
	r.Success = exit.Limit == fleet.LimitNone && r.ExitCode == 0
	return r
}

// sandboxEnded is the error of a machine's command whose sandbox ended
// under it ("canceled" as its limit: it did not end by itself).
const sandboxEnded = "the session's sandbox ended under the command: its init or interpreter is gone " +
	"(killed from inside, as kill -9 -1 as root does, or at its memory limit), or the session was closed or restarted"

var (
	shNotFound  = regexp.MustCompile(`(?m)^(?:/bin/)?(?:ba)?sh: (?:line )?\d+: (?:exec: )?([^:\n]+): (?:command )?(?:not found|Permission denied)$`)
	notAllowed  = regexp.MustCompile(`^program "([^"]+)" is not allowed`)
	cannotEnter = regexp.MustCompile(`(?m)^(?:/bin/)?sh: \d+: cd: can't cd to (.*)$`)
)

// NotAllowed reports the program a result's error says is not allowed
// (ok false: the error says something else).
func NotAllowed(msg string) (program string, ok bool) {
	if m := notAllowed.FindStringSubmatch(msg); m != nil {
		return m[1], true
	}
	return "", false
}

// commandError explains a failure the shell reported: a program that is
// not there to run (not allowed, or in a machine, which runs any program
// of its root, not installed), or a working directory that is missing.
func commandError(r *CommandResult, allowed []string, home string, machine bool) string {
	if r.ExitCode == 127 || r.ExitCode == 126 {
		if m := shNotFound.FindStringSubmatch(r.Stderr); m != nil {
			// The shell's line is the sandbox's to write: quoted, capped.
			program := bounded.String(m[1], bounded.QuoteMax)
			if machine {
				return fmt.Sprintf("program %q is not installed in this machine, or not on its PATH, or not executable", program)
			}
			return fmt.Sprintf("program %q is not allowed or not installed (allowed: %s; SANDBOX_ALLOWED_COMMANDS)", program, strings.Join(allowed, " "))
		}
	}
	if r.ExitCode == 2 {
		if m := cannotEnter.FindStringSubmatch(r.Stderr); m != nil {
			return "working_dir does not exist: " + bounded.String(strings.TrimPrefix(m[1], home+"/"), bounded.QuoteMax)
		}
	}
	if r.Signal > 0 && r.Signal < 65 {
		return fmt.Sprintf("the command was killed by signal %d (%s)", r.Signal, syscall.Signal(r.Signal))
	}
	if r.ExitCode != 0 {
		return fmt.Sprintf("the command exited with status %d", r.ExitCode)
	}
	return ""
}
