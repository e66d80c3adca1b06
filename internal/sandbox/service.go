package sandbox

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"syscall"
	"unicode/utf8"

	"github.com/codecage/codecage/internal/jail"
	"github.com/codecage/codecage/internal/policy"
	"github.com/codecage/codecage/internal/runtime"
)

// Config configures the service.
type Config struct {
	// Interpreter is the Python inside the jail (default /usr/bin/python3).
	Interpreter string
	// Defaults are the limits of a request that asks for none.
	Defaults jail.Limits
	// Bounds are the largest limits a request may ask for.
	Bounds policy.Bounds
	// MaxResultBytes bounds the encoded last-expression value.
	MaxResultBytes int
}

// Service runs executions. It is safe for concurrent use.
type Service struct {
	cfg Config
}

// New returns a service, or an error wrapping [ErrUnavailable] when this
// host cannot build the required sandbox.
func New(cfg Config) (*Service, error) {
	if err := jail.ProbeHost().Usable(); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	if cfg.Bounds == (policy.Bounds{}) {
		cfg.Bounds = policy.DefaultBounds
	}
	cfg.Defaults = cfg.Defaults.WithDefaults()
	if cfg.MaxResultBytes <= 0 || cfg.MaxResultBytes > runtime.MaxReplyBytes/2 {
		cfg.MaxResultBytes = 64 << 10
	}
	return &Service{cfg: cfg}, nil
}

// Execute runs req in a fresh sandbox. Failures of the code (exceptions,
// limits, crashes) are reported in the Result; the error is for requests
// that cannot run at all.
func (s *Service) Execute(ctx context.Context, req Request) (*Result, error) {
	limits, err := s.limits(req)
	if err != nil {
		return nil, err
	}
	if err := s.checkCode(req.Code); err != nil {
		return nil, err
	}
	var stdout, stderr bytes.Buffer
	sb, err := jail.Start(ctx, jail.Spec{
		Argv:   runtime.Argv(s.cfg.Interpreter),
		Env:    runtime.Env(),
		Limits: limits,
		Stdout: &stdout,
		Stderr: &stderr,
	})
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	rreq := runtime.Request{
		Code:           req.Code,
		AllowedImports: policy.ImportList(req.AllowedImports),
		Profile:        "basic",
		MaxResultBytes: s.cfg.MaxResultBytes,
	}
	if rreq.AllowedImports == nil {
		rreq.Profile = ""
	}
	replies := make(chan *runtime.Reply, 1)
	go func() {
		// The write fails at once if the program is already gone.
		if err := runtime.WriteRequest(sb.Channel(), rreq); err != nil {
			replies <- nil
			return
		}
		var rep runtime.Reply
		if err := runtime.ReadReply(sb.Channel(), &rep, runtime.MaxReplyBytes); err != nil {
			replies <- nil
			return
		}
		replies <- &rep
	}()
	exit := sb.Wait()
	// Every process of the sandbox is gone: the reader sees EOF if it has
	// no reply yet.
	rep := <-replies
	_ = sb.Channel().Close()
	return buildResult(sb, exit, rep, &stdout, &stderr, limits), nil
}

func (s *Service) limits(req Request) (jail.Limits, error) {
	b := s.cfg.Bounds
	l := s.cfg.Defaults
	checks := []error{
		policy.CheckDuration("timeout", req.Timeout, b.Timeout),
		policy.CheckDuration("cpu_time", req.CPUTime, b.CPUTime),
		policy.CheckBytes("memory_limit", req.MemoryBytes, b.MinMemory, b.MemoryBytes),
		policy.CheckBytes("output_limit", req.OutputBytes, 1, b.OutputBytes),
	}
	if err := errors.Join(checks...); err != nil {
		return l, fmt.Errorf("%w: %v", ErrInvalidRequest, err)
	}
	if req.Timeout > 0 {
		l.Timeout = req.Timeout
	}
	if req.CPUTime > 0 {
		l.CPUTime = req.CPUTime
	}
	if req.MemoryBytes > 0 {
		l.MemoryBytes = req.MemoryBytes
	}
	if req.OutputBytes > 0 {
		l.OutputBytes = req.OutputBytes
	}
	return l, nil
}

func (s *Service) checkCode(code string) error {
	if len(code) > s.cfg.Bounds.CodeBytes {
		return fmt.Errorf("%w: code is %d bytes, the limit is %d", ErrInvalidRequest, len(code), s.cfg.Bounds.CodeBytes)
	}
	if !utf8.ValidString(code) {
		off := 0
		for off < len(code) {
			r, size := utf8.DecodeRuneInString(code[off:])
			if r == utf8.RuneError && size <= 1 {
				break
			}
			off += size
		}
		return fmt.Errorf("%w: code is not valid UTF-8 (first bad byte at offset %d)", ErrInvalidRequest, off)
	}
	return nil
}

func buildResult(sb *jail.Sandbox, exit jail.Exit, rep *runtime.Reply, stdout, stderr *bytes.Buffer, lim jail.Limits) *Result {
	r := &Result{
		ExecutionID:   sb.ID(),
		Stdout:        strings.ToValidUTF8(stdout.String(), "\uFFFD"),
		Stderr:        strings.ToValidUTF8(stderr.String(), "\uFFFD"),
		Result:        json.RawMessage("null"),
		Variables:     []string{},
		ExitCode:      exit.ExitCode,
		ExecutionTime: exit.Duration.Seconds(),
		TimedOut:      exit.Limit == jail.LimitTimeout,
		OOMKilled:     exit.OOMKilled,
		Truncated:     exit.Truncated,
		Resources:     Resources{PeakMemoryBytes: exit.PeakMemoryBytes, CPUTimeSeconds: exit.CPUTime.Seconds()},
		Backend:       "native",
		Isolation:     sb.Layers(),
	}
	limit := exit.Limit
	if rep != nil {
		if len(rep.Result) > 0 {
			r.Result = rep.Result
		}
		r.ResultType = rep.ResultType
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
			if rep.Error.Type == "MemoryError" && limit == jail.LimitNone {
				limit = jail.LimitMemory
			}
		}
	}
	if limit != jail.LimitNone {
		name := string(limit)
		r.Limit = &name
		if rep == nil || r.Error == nil {
			r.Error = limitError(limit, lim)
		}
	} else if r.Error == nil && rep == nil {
		r.Error = exitError(exit)
	}
	r.Success = r.Error == nil && r.ExitCode == 0 && limit == jail.LimitNone
	return r
}

func limitError(l jail.Limit, lim jail.Limits) *ErrorInfo {
	switch l {
	case jail.LimitTimeout:
		return &ErrorInfo{Type: "TimeoutError", Message: fmt.Sprintf("execution exceeded the wall-clock limit of %s and was killed", lim.Timeout)}
	case jail.LimitCPU:
		return &ErrorInfo{Type: "CPUTimeLimitExceeded", Message: fmt.Sprintf("execution exceeded the CPU-time limit of %s and was killed", lim.CPUTime)}
	case jail.LimitMemory:
		return &ErrorInfo{Type: "MemoryError", Message: fmt.Sprintf("execution exceeded the memory limit of %d MiB and was killed", lim.MemoryBytes>>20)}
	case jail.LimitOutput:
		return &ErrorInfo{Type: "OutputLimitExceeded", Message: fmt.Sprintf("output exceeded the limit of %d bytes per stream; the run was stopped and its output truncated", lim.OutputBytes)}
	case jail.LimitCanceled:
		return &ErrorInfo{Type: "Canceled", Message: "execution was canceled"}
	}
	return &ErrorInfo{Type: "LimitExceeded", Message: string(l)}
}

func exitError(exit jail.Exit) *ErrorInfo {
	if exit.Signal != 0 {
		name := syscall.Signal(exit.Signal).String()
		return &ErrorInfo{Type: "Crash", Message: fmt.Sprintf("the interpreter was killed by signal %d (%s)", exit.Signal, name)}
	}
	if exit.ExitCode != 0 {
		return &ErrorInfo{Type: "Exit", Message: fmt.Sprintf("the interpreter exited with status %d before finishing", exit.ExitCode)}
	}
	return nil // os._exit(0): the code chose to end, successfully
}
