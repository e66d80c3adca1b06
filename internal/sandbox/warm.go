package sandbox

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/codecage/codecage/internal/jail"
	"github.com/codecage/codecage/internal/policy"
	"github.com/codecage/codecage/internal/pool"
	"github.com/codecage/codecage/internal/runtime"
)

// ErrBusy means every sandbox is in use and none freed up in time.
var ErrBusy = errors.New("sandbox busy")

// pooled is a sandbox started ahead of its work and kept by a class: a
// warm jail, or a cell forked by the class's zygote.
type pooled interface {
	runner
	// setOutput sends the sandbox's output to the run that took it.
	setOutput(stdout, stderr io.Writer)
	arm(ctx context.Context, timeout, cpu time.Duration)
	alive() bool
	destroy()
}

// class is one kind of pooled sandbox: what it was started with.
type class struct {
	name   string
	pool   *pool.Pool[pooled]
	limits jail.Limits
	zygote *zygote // nil: the class keeps whole warm jails
	// started is the pool once New returned: its refillers may call
	// create before the pool field is set.
	started atomic.Pointer[pool.Pool[pooled]]
}

// demand reports whether requests wait for this class's next sandbox.
func (cl *class) demand() bool {
	p := cl.started.Load()
	return p != nil && p.Stats().Waiting > 0
}

// startPools starts the pools the configuration asks for. With cgroups,
// a class forks its sandboxes from a zygote; without, it keeps whole jails.
func (s *Service) startPools() {
	c := s.cfg
	pc := pool.Config{Max: c.MaxSandboxes, QueueTimeout: c.QueueTimeout, Refillers: 2}
	if c.Isolation == policy.IsolationGVisor {
		s.startGVisorPools(pc) // no run uses the native pools
		return
	}
	if c.PoolSize > 0 {
		pc.Ready = c.PoolSize
		s.basic = s.newClass(policy.Basic, pc, c.MemoryLimit, runtime.Env(), nil)
	}
	if c.DataPoolSize > 0 && c.EnableDataScience {
		pc.Ready = c.DataPoolSize
		env, binds := preloadedDataScience()
		s.data = s.newClass(policy.DataScience, pc, c.DataMemory, env, binds)
	}
	if c.GVisorInUse() {
		s.startGVisorPools(pc)
	}
}

func (s *Service) startGVisorPools(pc pool.Config) {
	c := s.cfg
	// gVisor takes a few hundred milliseconds to boot: without these pools
	// every use_container run would wait for one.
	if c.GVisorPoolSize > 0 {
		pc.Ready = c.GVisorPoolSize
		s.gvBasic = s.newGVisorClass(policy.Basic, pc, c.MemoryLimit, runtime.Env(), nil)
	}
	if c.GVisorDataPoolSize > 0 && c.EnableDataScience {
		pc.Ready = c.GVisorDataPoolSize
		env, binds := preloadedDataScience()
		s.gvData = s.newGVisorClass(policy.DataScience, pc, c.DataMemory, env, binds)
	}
}

// preloadedDataScience is the environment and binds of a pooled
// data_science sandbox: numpy and pandas are imported once, before any
// request, so the run's own "import numpy" costs nothing.
func preloadedDataScience() (env, binds []string) {
	env, binds = runtime.DataScienceEnv(runtime.Env())
	return append(env, "CODECAGE_PRELOAD=numpy,pandas"), binds
}

// classLimits are the limits a pooled sandbox starts with.
func (s *Service) classLimits(memory int64) jail.Limits {
	c := s.cfg
	return jail.Limits{
		Timeout:        c.PoolMaxIdle, // until a run arms its own
		CPUTime:        c.CPUTime,     // per-process rlimit; runs arm a budget
		MemoryBytes:    memory,
		OutputBytes:    c.OutputSize,
		MaxProcesses:   c.MaxProcesses,
		FileSizeBytes:  c.MaxFileSize,
		OpenFiles:      c.MaxOpenFiles,
		TmpBytes:       c.TmpSize,
		WorkspaceBytes: c.WorkspaceMax,
	}
}

// newGVisorClass keeps whole gVisor sandboxes warm, each harness waiting.
func (s *Service) newGVisorClass(name string, pc pool.Config, memory int64, env, binds []string) *class {
	cl := &class{name: policy.IsolationGVisor + "/" + name, limits: s.classLimits(memory)}
	create := func(ctx context.Context) (pooled, error) {
		return s.startWarm(ctx, policy.IsolationGVisor, jail.Spec{Argv: runtime.Argv(s.cfg.Interpreter), Env: env, ReadOnlyBinds: binds, Binds: s.layerBinds, Limits: cl.limits})
	}
	cl.pool = pool.New(pc, create, func(p pooled) { p.destroy() }, func(p pooled) bool { return p.alive() })
	cl.started.Store(cl.pool)
	return cl
}

func (s *Service) newClass(name string, pc pool.Config, memory int64, env, binds []string) *class {
	c := s.cfg
	cl := &class{name: name, limits: s.classLimits(memory)}
	var create func(context.Context) (pooled, error)
	if c.Zygote && jail.ProbeHost().CgroupVersion() != 0 {
		cl.zygote = newZygote(c.Interpreter, env, binds, s.layerBinds, cl.limits)
		create = func(ctx context.Context) (pooled, error) {
			// A cell a request already waits for goes straight to it: warming
			// it would only delay that request and spend CPU the next needs.
			return cl.zygote.fork(ctx, cl.limits, !cl.demand())
		}
	} else {
		create = func(ctx context.Context) (pooled, error) {
			return s.startWarm(ctx, policy.IsolationNative, jail.Spec{Argv: runtime.Argv(c.Interpreter), Env: env, ReadOnlyBinds: binds, Binds: s.layerBinds, Limits: cl.limits})
		}
	}
	cl.pool = pool.New(pc, create, func(p pooled) { p.destroy() }, func(p pooled) bool { return p.alive() })
	cl.started.Store(cl.pool)
	return cl
}

// take returns a ready sandbox whose output goes to stdout and stderr.
func (cl *class) take(ctx context.Context, stdout, stderr io.Writer) (pooled, error) {
	p, err := cl.pool.Get(ctx)
	if err != nil {
		return nil, err
	}
	p.setOutput(stdout, stderr)
	return &taken{pooled: p, giveBack: cl.pool.Release}, nil
}

// taken is a pooled sandbox in use; releasing it returns its capacity.
type taken struct {
	pooled
	giveBack func()
}

func (t *taken) release() { t.giveBack() }

// warmJail is a whole sandbox (a jail, or gVisor's) whose harness waits
// for its request.
type warmJail struct {
	jailRun
	stdout, stderr *switchWriter
}

func (s *Service) startWarm(ctx context.Context, backend string, spec jail.Spec) (*warmJail, error) {
	w := &warmJail{stdout: &switchWriter{}, stderr: &switchWriter{}}
	spec.ID, spec.Stdout, spec.Stderr = jail.NewID(), w.stdout, w.stderr
	sb, err := s.startBox(ctx, backend, spec)
	if err != nil {
		return nil, err
	}
	w.sb, w.done = sb, func() {}
	return w, nil
}

func (w *warmJail) setOutput(stdout, stderr io.Writer) {
	w.stdout.set(stdout)
	w.stderr.set(stderr)
}

func (w *warmJail) arm(ctx context.Context, timeout, cpu time.Duration) { w.sb.Arm(ctx, timeout, cpu) }

func (w *warmJail) alive() bool {
	select {
	case <-w.sb.Done():
		return false
	default:
		return true
	}
}

func (w *warmJail) destroy() {
	w.sb.Kill(jail.LimitNone)
	w.sb.Wait()
	_ = w.sb.Channel().Close()
}

// pooledClass returns the pool that can serve a run, or nil: pooled
// sandboxes were started with their class's memory, output and per-process
// CPU limits, so only runs within those can use them.
func (s *Service) pooledClass(backend string, features policy.Features, l jail.Limits) *class {
	if features.Network {
		return nil // each network run has its own proxy, set at start
	}
	cl, data := s.basic, s.data
	if backend == policy.IsolationGVisor {
		cl, data = s.gvBasic, s.gvData
	}
	if features.DataScience {
		cl = data
	}
	if cl == nil || l.MemoryBytes != cl.limits.MemoryBytes || l.OutputBytes != cl.limits.OutputBytes || l.CPUTime > cl.limits.CPUTime {
		return nil
	}
	return cl
}

// acquire returns a sandbox for a run, armed with its limits.
func (s *Service) acquire(ctx context.Context, backend string, features policy.Features, l jail.Limits, spec jail.Spec) (runner, error) {
	busy := fmt.Errorf("%w: all %d sandboxes are in use (SANDBOX_MAX_SANDBOXES); try again shortly", ErrBusy, s.cfg.MaxSandboxes)
	if cl := s.pooledClass(backend, features, l); cl != nil {
		r, err := cl.take(ctx, spec.Stdout, spec.Stderr)
		if err != nil {
			if errors.Is(err, pool.ErrBusy) {
				return nil, busy
			}
			return nil, fmt.Errorf("%w: %v", ErrUnavailable, err)
		}
		r.arm(ctx, l.Timeout, l.CPUTime)
		return r, nil
	}
	select {
	case s.coldSlots <- struct{}{}:
	case <-time.After(s.cfg.QueueTimeout):
		return nil, busy
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	release := func() { <-s.coldSlots }
	sb, err := s.startBox(ctx, backend, spec)
	if err != nil {
		release()
		return nil, fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	return &jailRun{sb: sb, done: release}, nil
}

// Close ends the sessions, the ready sandboxes of every pool, and the
// zygotes. Runs in progress finish on their own.
func (s *Service) Close() {
	s.closeOnce.Do(func() { close(s.stop) })
	s.closeSpares()
	s.closeSessions()
	for _, cl := range s.classes() {
		if cl != nil {
			cl.pool.Close()
			if cl.zygote != nil {
				cl.zygote.close()
			}
		}
	}
}

// PoolStats reports each pool by class name, and the spare sessions of
// each backend as "session/native" and "session/gvisor".
func (s *Service) PoolStats() map[string]pool.Stats {
	out := map[string]pool.Stats{}
	for _, cl := range s.classes() {
		if cl != nil {
			out[cl.name] = cl.pool.Stats()
		}
	}
	s.spares.stats(out)
	return out
}

// classes are the service's pools, nil where not configured.
func (s *Service) classes() []*class {
	return []*class{s.basic, s.data, s.gvBasic, s.gvData}
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
