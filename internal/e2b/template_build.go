package e2b

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/codecage/codecage/internal/service"
)

// Template builds run in the background: the trigger starts one, the SDK
// polls its status and logs. The server keeps a bounded number of builds
// (old finished ones are forgotten) and runs one at a time (a build is
// heavy; the others wait, E2B's status "waiting").

const (
	maxBuildsKept   = 32
	maxLogEntries   = 2000
	maxLogBytes     = 512 << 10
	maxLogLine      = 2000
	buildTimeout    = 2 * time.Hour
	statusPageLimit = 100 // E2B's most log entries per status answer
)

// Build statuses, as E2B names them.
const (
	statusWaiting  = "waiting"
	statusBuilding = "building"
	statusReady    = "ready"
	statusError    = "error"
)

// logEntry is E2B's BuildLogEntry.
type logEntry struct {
	Timestamp time.Time `json:"timestamp"`
	Level     string    `json:"level"`
	Message   string    `json:"message"`
	Step      string    `json:"step,omitempty"`
}

// templateBuild is one build of a template.
type templateBuild struct {
	id, template, owner string
	created             time.Time

	mu        sync.Mutex
	status    string
	triggered bool
	reason    *stepError
	logs      []logEntry
	logBytes  int
	dropped   int    // lines not kept (over the caps)
	partial   []byte // a line the build's log has not ended yet
}

// log appends one entry, within the caps: past them lines are counted,
// not kept, so offsets the SDK holds stay valid.
func (b *templateBuild) log(level, step, msg string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.addLocked(level, step, msg)
}

func (b *templateBuild) addLocked(level, step, msg string) {
	if len(msg) > maxLogLine {
		msg = msg[:maxLogLine] + "…"
	}
	if len(b.logs) >= maxLogEntries || b.logBytes+len(msg) > maxLogBytes {
		b.dropped++
		return
	}
	b.logs = append(b.logs, logEntry{Timestamp: time.Now().UTC(), Level: level, Message: msg, Step: step})
	b.logBytes += len(msg)
}

// Write takes the build's output (service.EnvironmentBuild.Log), a line
// at a time.
func (b *templateBuild) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := len(p)
	for len(p) > 0 {
		i := indexByte(p, '\n')
		if i < 0 {
			room := maxLogLine + 1 - len(b.partial)
			b.partial = append(b.partial, p[:min(len(p), max(room, 0))]...)
			break
		}
		line := append(b.partial, p[:i]...)
		b.partial = nil
		b.addLocked("info", "", string(line))
		p = p[i+1:]
	}
	return n, nil
}

func indexByte(p []byte, c byte) int {
	for i, x := range p {
		if x == c {
			return i
		}
	}
	return -1
}

// finish records the outcome; the last line says how much of the log was
// not kept.
func (b *templateBuild) finish(err *stepError) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.partial) > 0 {
		b.addLocked("info", "", string(b.partial))
		b.partial = nil
	}
	if b.dropped > 0 {
		b.logs = append(b.logs, logEntry{Timestamp: time.Now().UTC(), Level: "warn",
			Message: fmt.Sprintf("%d lines of the build's log were not kept (at most %d lines, %d bytes)", b.dropped, maxLogEntries, maxLogBytes)})
		b.dropped = 0
	}
	if err != nil {
		b.status, b.reason = statusError, err
		b.logs = append(b.logs, logEntry{Timestamp: time.Now().UTC(), Level: "error", Message: err.Message, Step: err.Step})
		return
	}
	b.status = statusReady
}

// page is the build's status with its log entries from offset on.
func (b *templateBuild) page(offset, limit int) (status string, entries []logEntry, reason *stepError) {
	b.mu.Lock()
	defer b.mu.Unlock()
	offset = min(max(offset, 0), len(b.logs))
	end := min(offset+limit, len(b.logs))
	return b.status, append([]logEntry{}, b.logs[offset:end]...), b.reason
}

func (b *templateBuild) done() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.status == statusReady || b.status == statusError
}

// templateBuilds keeps the server's builds.
type templateBuilds struct {
	mu     sync.Mutex
	builds []*templateBuild // oldest first
	run    chan struct{}    // one build at a time
}

var (
	errTooManyBuilds = errors.New("too many template builds are waiting or running; retry when one has finished")
	errBuildRunning  = errors.New("the template is being built")
)

// add records a new build of template, forgetting the oldest finished
// (or never triggered) ones beyond the bound; a template has one build
// waiting or running at a time.
func (t *templateBuilds) add(template, owner string) (*templateBuild, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.run == nil {
		t.run = make(chan struct{}, 1)
	}
	for _, b := range t.builds {
		b.mu.Lock()
		busy := b.template == template && b.triggered && b.status != statusReady && b.status != statusError
		b.mu.Unlock()
		if busy {
			return nil, fmt.Errorf("%w: template %s, build %s; retry when it has finished", errBuildRunning, service.Quote(template), b.id)
		}
	}
	for len(t.builds) >= maxBuildsKept {
		i := t.oldestForgettable()
		if i < 0 {
			return nil, errTooManyBuilds
		}
		t.builds = append(t.builds[:i], t.builds[i+1:]...)
	}
	b := &templateBuild{id: newUUID(), template: template, owner: owner, created: time.Now(), status: statusWaiting}
	t.builds = append(t.builds, b)
	return b, nil
}

func (t *templateBuilds) oldestForgettable() int {
	for i, b := range t.builds {
		b.mu.Lock()
		idle := !b.triggered && time.Since(b.created) > time.Hour
		b.mu.Unlock()
		if b.done() || idle {
			return i
		}
	}
	return -1
}

// get is a build of the owner's.
func (t *templateBuilds) get(template, id, owner string) *templateBuild {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, b := range t.builds {
		if b.id == id && b.template == template && b.owner == owner {
			return b
		}
	}
	return nil
}

// latest is the newest build of a template (nil: none kept).
func (t *templateBuilds) latest(template string) *templateBuild {
	t.mu.Lock()
	defer t.mu.Unlock()
	for i := len(t.builds) - 1; i >= 0; i-- {
		if t.builds[i].template == template {
			return t.builds[i]
		}
	}
	return nil
}

// startBuild runs the build of spec in the background (waiting its turn).
func (s *Server) startBuild(ctx context.Context, b *templateBuild, stages []stage) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), buildTimeout)
	go func() {
		defer cancel()
		defer s.uploads.drop(b.template)
		s.builds.run <- struct{}{}
		defer func() { <-s.builds.run }()
		b.mu.Lock()
		b.status = statusBuilding
		b.mu.Unlock()
		b.finish(s.runBuild(ctx, b, stages))
	}()
}

// runBuild builds a template's chain of environments; a failed stage
// removes the stages this build made before it.
func (s *Server) runBuild(ctx context.Context, b *templateBuild, stages []stage) *stepError {
	prefix := stagePrefix(b.template, b.id)
	var made []string
	fail := func(st stage, err error) *stepError {
		for i := len(made) - 1; i >= 0; i-- {
			_ = s.svc.RemoveEnvironment(ctx, made[i])
		}
		return &stepError{Step: st.Step, Message: "building template " + b.template + " failed at " + st.What + ": " + capText(err.Error(), maxLogLine)}
	}
	for i, st := range stages {
		b.log("info", st.Step, fmt.Sprintf("stage %d of %d: %s into environment %s", i+1, len(stages), st.What, st.Build.Name))
		if st.Shared {
			reused, err := s.reuseShared(ctx, st)
			if err != nil {
				return fail(st, err)
			}
			if reused {
				b.log("info", st.Step, "reusing the Debian root "+st.Build.Name+" built before for the same release and packages")
				continue
			}
		}
		build := st.Build
		build.Log = b
		if i == len(stages)-1 && s.envExists(ctx, build.Name) {
			// A rebuild replaces the template (E2B builds a new version).
			b.log("info", st.Step, "replacing the existing environment "+build.Name)
			if err := s.removeTemplateEnv(ctx, build.Name, prefix); err != nil {
				return fail(st, err)
			}
		}
		var cleanup func()
		if build.Dockerfile != "" {
			dir, err := s.uploads.context(b.template, st.Copies)
			if err != nil {
				return fail(st, err)
			}
			build.ContextDir, cleanup = dir, func() { _ = os.RemoveAll(dir) }
		}
		_, err := s.svc.BuildEnvironment(ctx, build)
		if cleanup != nil {
			cleanup()
		}
		if err != nil {
			return fail(st, err)
		}
		if !st.Shared { // a shared root outlives this build, failed or not
			made = append(made, build.Name)
		}
	}
	b.log("info", "finalize", "template "+b.template+" is ready: Sandbox.create("+service.Quote(b.template)+") starts from it")
	return nil
}

// reuseShared reports whether a shared stage's environment exists and is
// what the stage asks for (its name is a short hash of the request).
func (s *Server) reuseShared(ctx context.Context, st stage) (bool, error) {
	e, ok := s.envLookup(ctx, st.Build.Name)
	if !ok {
		return false, nil
	}
	if e.Source.Kind != "debian" || e.Source.Ref != st.Build.Suite || !slices.Equal(e.Source.Packages, st.Build.Debian) {
		return false, fmt.Errorf("environment %s exists and is not the Debian root %s %v: remove it (codecage env rm %s)", st.Build.Name, st.Build.Suite, st.Build.Debian, st.Build.Name)
	}
	return true, nil
}

func capText(s string, n int) string {
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}
