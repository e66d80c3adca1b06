package session

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/codecage/codecage/internal/config"
	"github.com/codecage/codecage/internal/fleet"
	"github.com/codecage/codecage/internal/runtime"
)

// The table's tests run on a real fleet (its budget, leases and kept
// pools) whose sandboxes are stand-ins: a fakeBox speaks the harness's
// framing over a pipe, can be paused, and reports the CPU bandwidth it is
// given. No kernel sandbox is started, so the tests run under -race.

// Code the fake harness understands: anything else is answered with 42.
const (
	codeExit = "EXIT" // the interpreter exits with status 3, no reply
	codeHang = "HANG" // no reply until the sandbox is killed
)

// fakeStarter starts fakeBoxes for one backend.
type fakeStarter struct {
	started atomic.Int64
	fail    atomic.Bool

	mu    sync.Mutex
	boxes []*fakeBox
}

func (fs *fakeStarter) Start(_ context.Context, spec fleet.Spec) (fleet.Box, error) {
	if fs.fail.Load() {
		return nil, errors.New("fake: no sandbox today")
	}
	fs.started.Add(1)
	ours, theirs := net.Pipe()
	b := &fakeBox{id: spec.ID, uid: spec.HostUID, ch: ours, stdout: spec.Stdout, stderr: spec.Stderr, done: make(chan struct{})}
	if b.uid == 0 {
		b.uid = 4242
	}
	fs.mu.Lock()
	fs.boxes = append(fs.boxes, b)
	fs.mu.Unlock()
	go b.harness(theirs)
	return b, nil
}

// last is the sandbox started last.
func (fs *fakeStarter) last() *fakeBox {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	return fs.boxes[len(fs.boxes)-1]
}

// fakeBox is one stand-in sandbox (fleet.Box, and the optional pause and
// CPU interfaces the fleet looks for).
type fakeBox struct {
	id             string
	uid            int
	ch             net.Conn
	stdout, stderr io.Writer
	done           chan struct{}
	once           sync.Once

	mu      sync.Mutex
	exit    fleet.Exit
	paused  bool
	cores   []float64     // every CPU bandwidth set, in order
	cpu     time.Duration // CPU used so far (tests move it)
	unarm   func() bool
	timeout *time.Timer
}

var markerRE = regexp.MustCompile("\x00codecage-end-[^\n]*\n")

func (b *fakeBox) harness(c net.Conn) {
	defer b.end(fleet.Exit{})
	for {
		body, err := runtime.ReadRequest(c)
		if err != nil {
			return
		}
		switch {
		case bytes.Contains(body, []byte(codeExit)):
			b.end(fleet.Exit{ExitCode: 3})
			return
		case bytes.Contains(body, []byte(codeHang)):
			<-b.done
			return
		}
		_, _ = io.WriteString(b.stdout, "out\n")
		if m := markerRE.Find(body); m != nil {
			_, _ = b.stdout.Write(m)
			_, _ = b.stderr.Write(m)
		}
		if runtime.WriteReply(c, runtime.Reply{Result: []byte("42")}) != nil {
			return
		}
	}
}

// end ends the sandbox once, as e says.
func (b *fakeBox) end(e fleet.Exit) {
	b.once.Do(func() {
		b.mu.Lock()
		b.exit = e
		b.mu.Unlock()
		_ = b.ch.Close()
		close(b.done)
	})
}

func (b *fakeBox) ID() string                  { return b.id }
func (b *fakeBox) Channel() io.ReadWriteCloser { return b.ch }
func (b *fakeBox) Kill(l fleet.Limit)          { b.end(fleet.Exit{Limit: l}) }
func (b *fakeBox) Done() <-chan struct{}       { return b.done }
func (b *fakeBox) HostUID() int                { return b.uid }

func (b *fakeBox) Wait() fleet.Exit {
	<-b.done
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.exit
}

// Arm replaces the previous arming, as the jail's does: ctx's end kills
// the sandbox, and so does the timeout.
func (b *fakeBox) Arm(ctx context.Context, timeout, _ time.Duration) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.unarm != nil {
		b.unarm()
	}
	if b.timeout != nil {
		b.timeout.Stop()
	}
	b.unarm = context.AfterFunc(ctx, func() { b.Kill(fleet.LimitCanceled) })
	b.timeout = nil
	if timeout > 0 {
		b.timeout = time.AfterFunc(timeout, func() { b.Kill(fleet.LimitTimeout) })
	}
}

func (b *fakeBox) Pause() error { return b.setPaused(true) }

func (b *fakeBox) Resume() error { return b.setPaused(false) }

func (b *fakeBox) setPaused(p bool) error {
	select {
	case <-b.done:
		return fleet.ErrEnded
	default:
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.paused = p
	return nil
}

func (b *fakeBox) Paused() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.paused
}

func (b *fakeBox) SetCPU(cores float64) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.cores = append(b.cores, cores)
	return nil
}

func (b *fakeBox) CPUUsage() time.Duration {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.cpu
}

// spend has the sandbox use d more CPU time.
func (b *fakeBox) spend(d time.Duration) {
	b.mu.Lock()
	b.cpu += d
	b.mu.Unlock()
}

// lastCores is the CPU bandwidth the sandbox was given last (0: none yet).
func (b *fakeBox) lastCores() float64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.cores) == 0 {
		return 0
	}
	return b.cores[len(b.cores)-1]
}

// Checkpoint saves a gVisor stand-in's "memory image": its manifest only.
func (b *fakeBox) Checkpoint(_ context.Context, dir string, _ bool) (fleet.MemoryImage, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fleet.MemoryImage{}, err
	}
	return fleet.MemoryImage{UID: b.uid}, nil
}

// fakeFleet is the table's Fleet: a real fleet over fakeStarters, whose
// memory-image starts are plain starts on the gVisor stand-in.
type fakeFleet struct {
	*fleet.Fleet
	native, gvisor *fakeStarter
	images         atomic.Int64 // StartFromImage calls
}

func (f *fakeFleet) StartFromImage(ctx context.Context, _ string, w fleet.Work) (*fleet.Lease, error) {
	f.images.Add(1)
	return f.Start(ctx, fleet.GVisor, w.Spec())
}

// testTable is a table over a fake fleet of max sandboxes, its state in
// a temporary directory; edit changes its configuration first.
func testTable(t *testing.T, max int, edit ...func(*config.Config)) (*Table, *fakeFleet) {
	t.Helper()
	cfg := config.DefaultConfig()
	cfg.StateDir = t.TempDir()
	cfg.QueueTimeout = time.Second
	for _, e := range edit {
		e(&cfg)
	}
	native, gv := &fakeStarter{}, &fakeStarter{}
	f := &fakeFleet{native: native, gvisor: gv, Fleet: fleet.New(fleet.Config{MaxSandboxes: max, QueueTimeout: cfg.QueueTimeout,
		Starters: map[string]fleet.Starter{fleet.Native: native, fleet.GVisor: gv}})}
	var n atomic.Int64
	tab := NewTable(cfg, Options{Fleet: f,
		NewID:      func() string { return fmt.Sprintf("s%d", n.Add(1)) },
		StartError: func(_ context.Context, err error) error { return fmt.Errorf("%w: %v", ErrUnavailable, err) }})
	t.Cleanup(func() {
		tab.CloseAll()
		f.Close()
	})
	return tab, f
}

// native is a session's shape on the native stand-in.
var native = Shape{Backend: fleet.Native}

// create opens a session of owner, or fails the test.
func create(t *testing.T, tab *Table, req Request, shape Shape) (*Session, Info) {
	t.Helper()
	info, err := tab.Create(context.Background(), req, shape)
	if err != nil {
		t.Fatalf("Create(%+v): %v", req, err)
	}
	se, err := tab.Get(info.ID, req.Owner)
	if err != nil {
		t.Fatal(err)
	}
	return se, info
}

// run runs code in se as one request, and returns its outcome.
func run(t *testing.T, tab *Table, se *Session, code string, limits fleet.Limits) (fleet.Outcome, error) {
	t.Helper()
	r, err := tab.BeginRun(context.Background(), se, limits, nil)
	if err != nil {
		return fleet.Outcome{}, err
	}
	defer r.End()
	return r.Do(fleet.HarnessRequest{Code: code, KeepAlive: true}, nil, nil), nil
}

// inUse is how many slots of the fleet's budget are held, once the
// sandboxes ended meanwhile have given theirs back.
func inUse(t *testing.T, f *fakeFleet, want int) {
	t.Helper()
	waitFor(t, fmt.Sprintf("%d slots in use", want), func() bool { return f.Budget().InUse == want })
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(2 * time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatalf("timed out waiting for %s", what)
}

// exists reports whether path exists.
func exists(path string) bool {
	_, err := os.Lstat(path)
	return err == nil
}

// workspaces lists the directories left in the state directory's
// sessions (workspaces, package directories, /tmps).
func workspaces(t *testing.T, stateDir string) []string {
	t.Helper()
	entries, err := os.ReadDir(filepath.Join(stateDir, "sessions"))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		if e.IsDir() {
			names = append(names, e.Name())
		}
	}
	return names
}

// command starts a command (or a daemon) of se, run by a stand-in runner
// that ends it when its context does (the session closes, or pauses
// without memory) or when finish is called; finish returns once it has
// ended.
func command(t *testing.T, tab *Table, se *Session, daemon bool) (ctx context.Context, cmd Command, finish func()) {
	t.Helper()
	start := tab.StartCommand
	if daemon {
		start = tab.StartDaemon
	}
	ctx, cmd, done, err := start(context.Background(), se)
	if err != nil {
		t.Fatalf("start a command: %v", err)
	}
	stop, ended := make(chan struct{}), make(chan struct{})
	go func() {
		select {
		case <-ctx.Done():
		case <-stop:
		}
		done()
		close(ended)
	}()
	var once sync.Once
	finish = func() {
		once.Do(func() { close(stop) })
		<-ended
	}
	t.Cleanup(finish)
	return ctx, cmd, finish
}
