package report

import (
	"encoding/json"
	"fmt"
	"syscall"

	"github.com/codecage/codecage/internal/fleet"
)

// An execution's result, and how a run's outcome in the fleet becomes it:
// here, beside the parts of it a command's result shares, so that the
// root, which runs code statelessly and in sessions, only asks for it.

// Result is the outcome of one execution, the same on every surface.
type Result struct {
	Success     bool            `json:"success"`
	ExecutionID string          `json:"execution_id"`
	Stdout      string          `json:"stdout"`
	Stderr      string          `json:"stderr"`
	Result      json.RawMessage `json:"result"`
	ResultType  *string         `json:"result_type"`
	Variables   []string        `json:"variables"`
	// Images are the figures left open at the end of the run, as PNG.
	Images []fleet.Image `json:"images"`
	// Display is the last value by MIME type ("text/plain", "text/html",
	// "image/png" in base64, ...), when the request asked for it.
	Display map[string]string `json:"display,omitempty"`
	// Outputs are what the code displayed, in order (display() calls,
	// figures and images shown), when the request asked for Display;
	// Images is empty then.
	Outputs  []fleet.Output `json:"outputs,omitempty"`
	ExitCode int            `json:"exit_code"`
	Error    *ErrorInfo     `json:"error"`
	// ExecutionTime is the wall time of the sandbox, in seconds.
	ExecutionTime float64 `json:"execution_time"`
	TimedOut      bool    `json:"timed_out"`
	OOMKilled     bool    `json:"oom_killed"`
	Truncated     bool    `json:"truncated"`
	// Limit names the limit that ended the run, or is null.
	Limit *string `json:"limit"`
	// OutputDropped counts the lines a stream of the output (OnOutput)
	// left out because its client read too slowly, or is null; Stdout and
	// Stderr still hold them.
	OutputDropped *OutputDropped `json:"output_dropped"`
	Resources     Resources      `json:"resources"`
	Backend       string         `json:"backend"`
	Isolation     fleet.Layers   `json:"isolation"`
	// Runs is how many runs its session has taken, this one included
	// (a notebook's execution count); 0 for a stateless run. The E2B
	// surface answers it; it crosses replicas beside the result (the root's ranResult).
	Runs int `json:"-"`
	// Gone: the session was closed, or reached its end, while the code
	// ran (not only its interpreter). REST and MCP answer the failed
	// result as ever; the E2B surface breaks its stream, as a VM's
	// connection goes with the VM. It crosses replicas beside the result.
	Gone bool `json:"-"`
}

// ErrorInfo describes why a run failed: an exception of the code, or a
// limit, crash or exit status reported by the sandbox.
type ErrorInfo struct {
	Type      string `json:"type"`
	Message   string `json:"message"`
	Traceback string `json:"traceback"`
	Line      *int   `json:"line,omitempty"`
	Column    *int   `json:"column,omitempty"`
}

// Outcome names how a run ended.
func (r *Result) Outcome() string {
	switch {
	case r.Success:
		return "success"
	case r.Limit != nil:
		return *r.Limit
	case r.Error != nil && (r.Error.Type == "Crash" || r.Error.Type == "Exit"):
		return "crash"
	}
	return "error"
}

// Build turns a run's outcome into its result; layers are those of
// backend, which ran it.
func Build(id, backend string, o fleet.Outcome, lim fleet.Limits, layers fleet.Layers) *Result {
	exit, rep := o.Exit, o.Reply
	r := &Result{
		ExecutionID:   id,
		Stdout:        o.Stdout,
		Stderr:        o.Stderr,
		Result:        json.RawMessage("null"),
		Variables:     []string{},
		ExitCode:      exit.ExitCode,
		ExecutionTime: exit.Duration.Seconds(),
		TimedOut:      exit.Limit == fleet.LimitTimeout,
		OOMKilled:     exit.OOMKilled,
		Truncated:     exit.Truncated,
		Resources:     Resources{PeakMemoryBytes: exit.PeakMemoryBytes, CPUTimeSeconds: exit.CPUTime.Seconds()},
		Backend:       backend,
		Isolation:     layers,
	}
	limit := exit.Limit
	if rep != nil {
		if len(rep.Result) > 0 {
			r.Result = rep.Result
		}
		r.ResultType = rep.ResultType
		r.Images, r.Display, r.Outputs = rep.Images, rep.Display, rep.Outputs
		if rep.Variables != nil {
			r.Variables = rep.Variables
		}
		if exit.Signal == 0 {
			r.ExitCode = rep.ExitCode
		}
		if rep.Error != nil {
			r.Error = &ErrorInfo{Type: rep.Error.Type, Message: rep.Error.Message, Traceback: rep.Error.Traceback, Line: rep.Error.Line, Column: rep.Error.Column}
			// Without a memory cgroup the address-space limit surfaces as
			// a MemoryError: it is still the memory limit.
			if rep.Error.Type == "MemoryError" && limit == fleet.LimitNone {
				limit = fleet.LimitMemory
			}
		}
	}
	if limit != fleet.LimitNone {
		name := string(limit)
		r.Limit = &name
		if rep == nil || r.Error == nil {
			r.Error = LimitError(limit, lim)
		}
	} else if r.Error == nil && rep == nil {
		r.Error = exitError(exit)
	}
	r.Success = r.Error == nil && r.ExitCode == 0 && limit == fleet.LimitNone
	return r
}

// LimitError describes the limit l of lim that ended a run.
func LimitError(l fleet.Limit, lim fleet.Limits) *ErrorInfo {
	switch l {
	case fleet.LimitTimeout:
		return &ErrorInfo{Type: "TimeoutError", Message: fmt.Sprintf("execution exceeded the wall-clock limit of %s and was killed", lim.Timeout)}
	case fleet.LimitCPU:
		return &ErrorInfo{Type: "CPUTimeLimitExceeded", Message: fmt.Sprintf("execution exceeded the CPU-time limit of %s and was killed", lim.CPUTime)}
	case fleet.LimitMemory:
		return &ErrorInfo{Type: "MemoryError", Message: fmt.Sprintf("execution exceeded the memory limit of %d MiB and was killed", lim.MemoryBytes>>20)}
	case fleet.LimitOutput:
		return &ErrorInfo{Type: "OutputLimitExceeded", Message: fmt.Sprintf("output exceeded the limit of %d bytes per stream; the run was stopped and its output truncated", lim.OutputBytes)}
	case fleet.LimitCanceled:
		return &ErrorInfo{Type: "Canceled", Message: "execution was canceled"}
	}
	return &ErrorInfo{Type: "LimitExceeded", Message: string(l)}
}

func exitError(exit fleet.Exit) *ErrorInfo {
	if exit.Signal != 0 {
		name := syscall.Signal(exit.Signal).String()
		return &ErrorInfo{Type: "Crash", Message: fmt.Sprintf("the interpreter was killed by signal %d (%s)", exit.Signal, name)}
	}
	if exit.ExitCode != 0 {
		return &ErrorInfo{Type: "Exit", Message: fmt.Sprintf("the interpreter exited with status %d before finishing", exit.ExitCode)}
	}
	return nil // os._exit(0): the code chose to end, successfully
}
