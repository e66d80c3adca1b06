package envs

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/codecage/codecage/internal/envstore"
	"github.com/codecage/codecage/internal/service/errdefs"
)

// envBuild is one environment build in progress: its request, its
// staging, the record it fills, its log, and the uses of the environments
// it builds on (held until it ends, so that no collection takes them).
type envBuild struct {
	b    BuildRequest
	st   *envstore.Staging
	meta envstore.Env
	log  *buildLog
	uses []func()
}

// Build runs a build checked by Check and records the environment: one at
// a time per name, at most SANDBOX_ENV_MAX_BUILDS at once, within
// SANDBOX_ENV_BUILD_TIMEOUT; on any failure the staging goes and nothing
// is recorded. The caller ties ctx to the service's shutdown.
func (d *Envs) Build(ctx context.Context, b BuildRequest) (envstore.Env, error) {
	done, err := d.use.startBuild(b.Name, max(d.cfg.EnvMaxBuilds, 1))
	if err != nil {
		return envstore.Env{}, err
	}
	defer done()
	if _, err := d.store.Get(b.Name); err == nil {
		return envstore.Env{}, fmt.Errorf("environment %q: %w (remove it first: codecage env rm %s)", b.Name, envstore.ErrExists, b.Name)
	} else if !errors.Is(err, envstore.ErrNotFound) {
		return envstore.Env{}, envError(b.Name, err)
	}
	timeout := d.cfg.EnvBuildTimeout
	if timeout <= 0 {
		timeout = 30 * time.Minute
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	eb := &envBuild{b: b, log: newBuildLog(b.Log),
		meta: envstore.Env{Name: b.Name, Preimport: b.Preimport, StartCmd: b.StartCmd, ReadyCmd: b.ReadyCmd, Workdir: b.Workdir, Vars: b.Vars}}
	defer eb.log.flush()
	defer func() {
		for _, release := range eb.uses {
			release()
		}
	}()
	start := time.Now()
	env, err := d.runBuild(ctx, eb)
	if err != nil {
		err = buildError(ctx, b.Name, timeout, err)
		eb.log.printf("environment %s: failed after %s: %v", b.Name, time.Since(start).Round(time.Millisecond), err)
		return envstore.Env{}, err
	}
	eb.log.printf("environment %s: built in %s: %s, %d bytes, Python %s at %s", env.Name, time.Since(start).Round(time.Millisecond), env.ID, env.Size, env.PythonVersion, env.Python)
	return env, nil
}

func (d *Envs) runBuild(ctx context.Context, eb *envBuild) (envstore.Env, error) {
	st, err := d.store.Stage()
	if err != nil {
		return envstore.Env{}, fmt.Errorf("%w: environment %s: staging: %v", errdefs.ErrUnavailable, eb.b.Name, err)
	}
	eb.st = st
	committed := false
	defer func() {
		if !committed {
			st.Abort()
		}
	}()
	b := eb.b
	switch {
	case len(b.Requirements) > 0:
		err = d.buildRequirements(ctx, eb)
	case len(b.Debian) > 0:
		err = d.buildDebian(ctx, eb)
	case b.Image != "":
		err = d.buildImage(ctx, eb)
	default:
		err = d.buildDockerfile(ctx, eb)
	}
	if err != nil {
		return envstore.Env{}, err
	}
	if err := d.checkEnvironment(ctx, eb); err != nil {
		return envstore.Env{}, err
	}
	if err := ctx.Err(); err != nil {
		return envstore.Env{}, err
	}
	eb.log.printf("recording environment %s", b.Name)
	env, err := d.store.Commit(st, eb.meta)
	if err != nil {
		return envstore.Env{}, envError(b.Name, err)
	}
	committed = true
	return env, nil
}

// buildError says why a build failed, classified: its time ran out, it
// was canceled, or it failed (ErrBuildFailed unless already classified).
func buildError(ctx context.Context, name string, timeout time.Duration, err error) error {
	switch {
	case errors.Is(ctx.Err(), context.DeadlineExceeded):
		return fmt.Errorf("%w: environment %s: the build did not finish within %s (SANDBOX_ENV_BUILD_TIMEOUT)", errdefs.ErrBuildFailed, name, timeout)
	case ctx.Err() != nil:
		return fmt.Errorf("environment %s: the build was canceled: %w", name, ctx.Err())
	case errdefs.ErrorKind(err) != errdefs.KindInternal:
		return err
	}
	return fmt.Errorf("%w: environment %s: %v", errdefs.ErrBuildFailed, name, err)
}

// maxBuildLogLine bounds one line of a build's log (pip, mmdebstrap and
// buildah print what packages and images say).
const maxBuildLogLine = 2000

// buildLog passes a build's output on line by line, each line capped and
// made valid UTF-8. It never fails the build: once its writer fails (a
// client gone), the rest is dropped.
type buildLog struct {
	mu      sync.Mutex
	w       io.Writer
	partial []byte
	broken  bool
}

func newBuildLog(w io.Writer) *buildLog {
	if w == nil {
		w = io.Discard
	}
	return &buildLog{w: w}
}

func (l *buildLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := len(p)
	for len(p) > 0 {
		i := bytes.IndexAny(p, "\r\n")
		if i < 0 {
			room := maxBuildLogLine + 1 - len(l.partial) // one byte over: the line is marked cut
			l.partial = append(l.partial, p[:min(len(p), max(room, 0))]...)
			break
		}
		room := maxBuildLogLine + 1 - len(l.partial)
		l.partial = append(l.partial, p[:min(i, max(room, 0))]...)
		l.emit()
		p = p[i+1:]
	}
	return n, nil
}

// emit writes the line collected so far (the lock held).
func (l *buildLog) emit() {
	line := l.partial
	l.partial = l.partial[:0]
	if len(line) == 0 || l.broken {
		return
	}
	s := string(line)
	if len(s) > maxBuildLogLine {
		s = s[:maxBuildLogLine] + "…"
	}
	s = strings.ToValidUTF8(s, "\uFFFD")
	if _, err := io.WriteString(l.w, s+"\n"); err != nil {
		l.broken = true
	}
}

// flush writes an unfinished last line.
func (l *buildLog) flush() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.emit()
}

// printf writes one line of the build's own.
func (l *buildLog) printf(format string, a ...any) {
	msg := fmt.Sprintf(format, a...)
	if !utf8.ValidString(msg) {
		msg = strings.ToValidUTF8(msg, "\uFFFD")
	}
	_, _ = l.Write([]byte(msg + "\n"))
}
