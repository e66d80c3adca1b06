package sandbox

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/codecage/codecage/internal/jail"
	"github.com/codecage/codecage/internal/policy"
	"github.com/codecage/codecage/internal/pool"
	"github.com/codecage/codecage/internal/runtime"
)

// ErrBusy means every sandbox is in use and none freed up in time.
var ErrBusy = errors.New("sandbox busy")

// warm is a sandbox started ahead of its work: jailed, limited, the harness
// waiting for a request. Its output goes wherever the run that takes it
// says.
type warm struct {
	sb             *jail.Sandbox
	stdout, stderr *switchWriter
	limits         jail.Limits
}

// class is one kind of pooled sandbox: what it was started with.
type class struct {
	name   string
	pool   *pool.Pool[*warm]
	limits jail.Limits
}

// startPools starts the pools the configuration asks for.
func (s *Service) startPools() {
	c := s.cfg
	pc := pool.Config{Max: c.MaxSandboxes, QueueTimeout: c.QueueTimeout, Refillers: 2}
	if c.PoolSize > 0 {
		pc.Ready = c.PoolSize
		s.basic = s.newClass(policy.Basic, pc, c.MemoryLimit, runtime.Env(), nil)
	}
	if c.DataPoolSize > 0 && c.EnableDataScience {
		pc.Ready = c.DataPoolSize
		env, binds := runtime.DataScienceEnv(runtime.Env())
		// Imported once per sandbox before any request: the run's own
		// "import numpy" then costs nothing.
		env = append(env, "CODECAGE_PRELOAD=numpy,pandas")
		s.data = s.newClass(policy.DataScience, pc, c.DataMemory, env, binds)
	}
}

func (s *Service) newClass(name string, pc pool.Config, memory int64, env, binds []string) *class {
	c := s.cfg
	cl := &class{name: name, limits: jail.Limits{
		Timeout:        c.PoolMaxIdle, // until a run arms its own
		CPUTime:        c.CPUTime,     // per-process rlimit; runs arm a budget
		MemoryBytes:    memory,
		OutputBytes:    c.OutputSize,
		MaxProcesses:   c.MaxProcesses,
		FileSizeBytes:  c.MaxFileSize,
		OpenFiles:      c.MaxOpenFiles,
		TmpBytes:       c.TmpSize,
		WorkspaceBytes: c.WorkspaceMax,
	}}
	create := func(ctx context.Context) (*warm, error) {
		w := &warm{stdout: &switchWriter{}, stderr: &switchWriter{}, limits: cl.limits}
		sb, err := jail.Start(ctx, jail.Spec{
			ID: jail.NewID(), Argv: runtime.Argv(c.Interpreter), Env: env, ReadOnlyBinds: binds,
			Limits: cl.limits, Stdout: w.stdout, Stderr: w.stderr,
		})
		if err != nil {
			return nil, err
		}
		w.sb = sb
		return w, nil
	}
	destroy := func(w *warm) {
		w.sb.Kill(jail.LimitNone)
		w.sb.Wait()
		_ = w.sb.Channel().Close()
	}
	alive := func(w *warm) bool {
		select {
		case <-w.sb.Done():
			return false
		default:
			return true
		}
	}
	cl.pool = pool.New(pc, create, destroy, alive)
	return cl
}

// pooledClass returns the pool that can serve a run, or nil: pooled
// sandboxes were started with their class's memory, output and per-process
// CPU limits, so only runs within those can use them.
func (s *Service) pooledClass(imports policy.ImportPolicy, l jail.Limits) *class {
	if imports.Uses(policy.Network) {
		return nil // each network run has its own proxy, set at start
	}
	cl := s.basic
	if imports.Uses(policy.DataScience) {
		cl = s.data
	}
	if cl == nil || l.MemoryBytes != cl.limits.MemoryBytes || l.OutputBytes != cl.limits.OutputBytes || l.CPUTime > cl.limits.CPUTime {
		return nil
	}
	return cl
}

// acquire returns a sandbox for a run, armed with its limits, and the
// function that gives its capacity back.
func (s *Service) acquire(ctx context.Context, imports policy.ImportPolicy, l jail.Limits, spec jail.Spec) (*jail.Sandbox, func(), error) {
	if cl := s.pooledClass(imports, l); cl != nil {
		w, err := cl.pool.Get(ctx)
		if err != nil {
			if errors.Is(err, pool.ErrBusy) {
				return nil, nil, fmt.Errorf("%w: all %d sandboxes are in use (SANDBOX_MAX_SANDBOXES); try again shortly", ErrBusy, s.cfg.MaxSandboxes)
			}
			return nil, nil, fmt.Errorf("%w: %v", ErrUnavailable, err)
		}
		w.stdout.set(spec.Stdout)
		w.stderr.set(spec.Stderr)
		w.sb.Arm(ctx, l.Timeout, l.CPUTime)
		return w.sb, cl.pool.Release, nil
	}
	select {
	case s.coldSlots <- struct{}{}:
	case <-time.After(s.cfg.QueueTimeout):
		return nil, nil, fmt.Errorf("%w: all %d sandboxes are in use (SANDBOX_MAX_SANDBOXES); try again shortly", ErrBusy, s.cfg.MaxSandboxes)
	case <-ctx.Done():
		return nil, nil, ctx.Err()
	}
	release := func() { <-s.coldSlots }
	sb, err := jail.Start(ctx, spec)
	if err != nil {
		release()
		return nil, nil, fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	return sb, release, nil
}

// Close ends the ready sandboxes of every pool.
func (s *Service) Close() {
	for _, cl := range []*class{s.basic, s.data} {
		if cl != nil {
			cl.pool.Close()
		}
	}
}

// PoolStats reports each pool by class name.
func (s *Service) PoolStats() map[string]pool.Stats {
	out := map[string]pool.Stats{}
	for _, cl := range []*class{s.basic, s.data} {
		if cl != nil {
			out[cl.name] = cl.pool.Stats()
		}
	}
	return out
}

// switchWriter sends a pooled sandbox's output to the run that took it;
// before that, it is dropped.
type switchWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (s *switchWriter) set(w io.Writer) {
	s.mu.Lock()
	s.w = w
	s.mu.Unlock()
}

// Write implements io.Writer.
func (s *switchWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.w == nil {
		return len(p), nil
	}
	return s.w.Write(p)
}
