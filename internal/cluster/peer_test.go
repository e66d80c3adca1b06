package cluster

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/codecage/codecage/internal/service"
)

// recServer is a service that records the calls it serves.
type recServer struct {
	mu    sync.Mutex
	calls []service.PeerCall
}

func (s *recServer) ServePeer(_ context.Context, call service.PeerCall, _ func(stream, line string)) (any, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls = append(s.calls, call)
	return "ok", nil
}

// bodies records the bodies of the calls h receives.
func bodies(h http.Handler, into *[]string) http.Handler {
	var mu sync.Mutex
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		*into = append(*into, string(b))
		mu.Unlock()
		r.Body = io.NopCloser(bytes.NewReader(b))
		h.ServeHTTP(w, r)
	})
}

// TestPeerProtocolNegotiated: a replica sends the old shape of a call
// until the replica it calls answers that it reads the typed one; one of
// the release before never says so, and keeps getting calls it reads.
func TestPeerProtocolNegotiated(t *testing.T) {
	secret := []byte("0123456789abcdef0123456789abcdef")
	from := &Node{id: "r1", secret: secret, client: http.DefaultClient}
	to := &Node{id: "r2", secret: secret}
	call := service.PeerCall{Op: "pause", Owner: "alice", SessionID: "sx-r2", Args: json.RawMessage(`{"keep_memory":true}`)}

	svc := &recServer{}
	var sent []string
	srv := httptest.NewServer(bodies(to.Handler(svc, 1<<20, time.Second), &sent))
	defer srv.Close()
	// The release before: it answers without the protocol header.
	var sentOld []string
	old := httptest.NewServer(bodies(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, `{"result":"ok"}`+"\n")
	}), &sentOld))
	defer old.Close()

	for range 2 {
		for _, r := range []replica{{ID: "r2", URL: srv.URL}, {ID: "r0", URL: old.URL}} {
			if raw, err := from.send(context.Background(), r, call, nil); err != nil || string(raw) != `"ok"` {
				t.Fatalf("to %s: %s, %v", r.ID, raw, err)
			}
		}
	}
	typed := func(body string) bool { return strings.Contains(body, `"args":`) }
	if len(sent) != 2 || typed(sent[0]) || !typed(sent[1]) {
		t.Errorf("to a replica of this release: %q, want the old shape, then the typed one", sent)
	}
	if len(sentOld) != 2 || typed(sentOld[0]) || typed(sentOld[1]) || !strings.Contains(sentOld[1], `"keep_memory":true`) {
		t.Errorf("to a replica of the release before: %q, want the old shape both times", sentOld)
	}
	// Both shapes reach the service as the same call.
	if len(svc.calls) != 2 {
		t.Fatalf("served %d calls", len(svc.calls))
	}
	for i, c := range svc.calls {
		var args struct {
			KeepMemory bool `json:"keep_memory"`
		}
		if err := json.Unmarshal(c.Args, &args); err != nil || c.Op != "pause" || c.SessionID != "sx-r2" || c.Owner != "alice" || !args.KeepMemory {
			t.Errorf("call %d served as %+v (%v)", i, c, err)
		}
	}
}
