package httpapi_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/codecage/codecage/internal/access"
	"github.com/codecage/codecage/internal/audit"
	"github.com/codecage/codecage/internal/config"
	"github.com/codecage/codecage/internal/httpapi"
	"github.com/codecage/codecage/internal/jail"
	"github.com/codecage/codecage/internal/mcpserver"
	"github.com/codecage/codecage/internal/metrics"
	"github.com/codecage/codecage/internal/service"
)

func TestMain(m *testing.M) {
	jail.MaybeRunInit() // the test binary is re-executed as the sandbox init
	os.Exit(m.Run())
}

// testServer is a real server: service, warm pools, audit log, metrics,
// REST and MCP, on a loopback listener.
type testServer struct {
	URL   string
	svc   *service.Service
	rec   *audit.Recorder
	store *audit.SQLite
	log   *bytes.Buffer
}

// auditObserver is the same mapping as the serve command's, kept small.
type auditObserver struct{ rec *audit.Recorder }

func (a auditObserver) Observe(ev service.Event) {
	e := audit.Event{Time: ev.Time, Kind: ev.Kind, ExecutionID: ev.ExecutionID, Key: ev.Caller.Key, Surface: ev.Caller.Surface,
		Profile: ev.Profile, Outcome: ev.Outcome, Duration: ev.Duration, Limit: ev.Limit, SecurityEvents: ev.SecurityEvents, Detail: ev.Detail, Backend: ev.Backend}
	if ev.Code != "" {
		e.CodeHash, e.Code = service.HashCode(ev.Code), ev.Code
	}
	a.rec.Record(e)
}

func startServer(t testing.TB, keys string, edit func(*config.Config)) *testServer {
	t.Helper()
	return startServerOpts(t, keys, edit, nil)
}

// startServerOpts is startServer with the service's options.
func startServerOpts(t testing.TB, keys string, edit func(*config.Config), opts *service.Options) *testServer {
	t.Helper()
	cfg := config.DefaultConfig()
	cfg.PoolSize = 2
	cfg.DataPoolSize = 0
	// No spare sessions, and one gVisor sandbox where a test turns gVisor
	// on: each is a sandbox (under gVisor a boot) started with the server
	// that most tests never use. Tests of spares set their own.
	cfg.SessionPoolSize, cfg.GVisorSessionPoolSize, cfg.GVisorPoolSize = 0, 0, 1
	cfg.MachinePoolSize = 0
	cfg.StateDir = t.TempDir()
	if edit != nil {
		edit(&cfg)
	}
	svc, err := service.New(cfg, opts)
	if err != nil {
		t.Fatalf("service.New: %v", err)
	}
	store, err := audit.OpenSQLite(filepath.Join(t.TempDir(), "audit.db"))
	if err != nil {
		t.Fatal(err)
	}
	logBuf := &bytes.Buffer{}
	log := slog.New(slog.NewJSONHandler(&lockedWriter{w: logBuf}, nil))
	rec := audit.NewRecorder(store, 1024, log)
	m := metrics.New(svc)
	svc.SetObserver(service.Observers{m, auditObserver{rec}})
	k, err := access.ParseKeys(keys)
	if err != nil {
		t.Fatal(err)
	}
	streamable, sse := mcpserver.HTTPHandlers(svc, mcpserver.Options{Config: cfg, Log: log}, false)
	api := httpapi.New(svc, httpapi.Options{Keys: k, Metrics: m, Log: log, MCP: streamable, MCPSSE: sse, Version: "test",
		Ready: func(ctx context.Context) map[string]string { return map[string]string{"audit_log": ""} }, Config: cfg})
	hs := httptest.NewServer(api)
	t.Cleanup(func() {
		hs.CloseClientConnections()
		hs.Close()
		svc.Close()
		_ = rec.Close(context.Background())
		_ = store.Close()
	})
	return &testServer{URL: hs.URL, svc: svc, rec: rec, store: store, log: logBuf}
}

type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// call sends a request with an optional bearer key and JSON body, and
// decodes a JSON answer into out (when not nil).
func (ts *testServer) call(t testing.TB, method, path, key string, body any, out any) *http.Response {
	t.Helper()
	var rd io.Reader
	if body != nil {
		if s, ok := body.(string); ok {
			rd = strings.NewReader(s)
		} else {
			b, _ := json.Marshal(body)
			rd = bytes.NewReader(b)
		}
	}
	req, err := http.NewRequest(method, ts.URL+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	if out != nil && len(data) > 0 {
		if err := json.Unmarshal(data, out); err != nil {
			t.Fatalf("%s %s: status %d, body %q: %v", method, path, resp.StatusCode, data, err)
		}
	}
	resp.Body = io.NopCloser(bytes.NewReader(data))
	return resp
}

// problem is the RFC 9457 body of an error.
type problem struct {
	Type       string `json:"type"`
	Title      string `json:"title"`
	Status     int    `json:"status"`
	Detail     string `json:"detail"`
	Kind       string `json:"kind"`
	RetryAfter int    `json:"retry_after"`
}

// wantProblem checks an error answer: status, problem+json, stable type.
func wantProblem(t testing.TB, resp *http.Response, status int, kind string) problem {
	t.Helper()
	var p problem
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != status {
		t.Fatalf("status %d, want %d: %s", resp.StatusCode, status, body)
	}
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/problem+json") {
		t.Fatalf("content type %q, want application/problem+json: %s", ct, body)
	}
	if err := json.Unmarshal(body, &p); err != nil {
		t.Fatalf("problem body %q: %v", body, err)
	}
	if p.Type != httpapi.ProblemTypePrefix+kind || p.Kind != kind || p.Status != status || p.Title == "" {
		t.Fatalf("problem %+v, want kind %s status %d", p, kind, status)
	}
	return p
}

// sseEvent is one server-sent event.
type sseEvent struct {
	Event string
	Data  string
}

// readEvents sends each event of an event stream to the channel, then
// closes it.
func readEvents(r io.Reader, out chan<- sseEvent) {
	defer close(out)
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	var ev sseEvent
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			if ev.Event != "" || ev.Data != "" {
				out <- ev
			}
			ev = sseEvent{}
		case strings.HasPrefix(line, "event: "):
			ev.Event = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			ev.Data += strings.TrimPrefix(line, "data: ")
		}
	}
}

// events reads the audit log after flushing the recorder.
func (ts *testServer) events(t testing.TB) []audit.Event {
	t.Helper()
	if err := ts.rec.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	evs, err := ts.store.List(context.Background(), audit.Query{Limit: 10000})
	if err != nil {
		t.Fatal(err)
	}
	return evs
}
