package httpapi_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/codecage/codecage/internal/config"
	"github.com/codecage/codecage/internal/pipfixture"
)

// What an admitted run does for itself, a "!cmd" line and a "%pip
// install" (calls the harness makes back to the service), takes no
// second admission slot: with one slot per key, a session run of both
// succeeds. The slot is still the key's one: an independent request of
// the same key while that run goes on is refused, and one of another key
// is not.
func TestMagicsTakeNoSecondAdmissionSlot(t *testing.T) {
	wh := t.TempDir()
	if _, err := pipfixture.Wheel(wh, "magiclib", "1.2", pipfixture.WheelOptions{}); err != nil {
		t.Fatal(err)
	}
	ts := startServer(t, twoKeys, func(c *config.Config) {
		c.KeyConcurrency = 1
		c.RateLimit = 0
		c.PipFindLinks = wh
	})
	var se struct {
		ID string `json:"session_id"`
	}
	if resp := ts.call(t, "POST", "/sessions", aliceKey, map[string]any{}, &se); resp.StatusCode != 201 {
		t.Fatalf("create session: %d", resp.StatusCode)
	}
	// The magics, then a line that says they are done, then a wait for
	// the test's go-ahead: the run holds alice's slot meanwhile.
	code := strings.Join([]string{
		"!echo hi from the shell",
		"%pip install magiclib",
		"print('magics done', flush=True)",
		"import time",
		"for _ in range(3000):",
		"    try:",
		"        open('/workspace/go').close(); break",
		"    except OSError:",
		"        time.sleep(0.01)",
		"else:",
		"    raise SystemExit('never released')",
		"'done'",
	}, "\n")
	body, _ := json.Marshal(map[string]any{"code": code, "timeout": 120})
	req, _ := http.NewRequest("POST", ts.URL+"/sessions/"+se.ID+"/execute", strings.NewReader(string(body)))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("Authorization", "Bearer "+aliceKey)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("session execute: %d", resp.StatusCode)
	}
	events := make(chan sseEvent, 64)
	go readEvents(resp.Body, events)
	var seen []sseEvent
	deadline := time.After(110 * time.Second)
wait:
	for {
		select {
		case ev, ok := <-events:
			if !ok {
				t.Fatalf("the run ended before its magics were done: %+v", seen)
			}
			seen = append(seen, ev)
			if ev.Event == "stdout" && strings.Contains(ev.Data, "magics done") {
				break wait
			}
			if ev.Event == "result" {
				t.Fatalf("the run ended before its magics were done: %+v", seen)
			}
		case <-deadline:
			t.Fatalf("no sign of the magics after 110 s: %+v", seen)
		}
	}
	// Alice's one slot is the run's: another request of hers is refused,
	// bob's is not.
	wantProblem(t, ts.call(t, "POST", "/execute", aliceKey, map[string]any{"code": "1"}, nil), 429, "rate_limited")
	var other result
	if resp := ts.call(t, "POST", "/execute", bobKey, map[string]any{"code": "1"}, &other); resp.StatusCode != 200 || !other.Success {
		t.Fatalf("bob while alice's run holds her slot: %d %+v", resp.StatusCode, other)
	}
	if r := ts.call(t, "PUT", "/sessions/"+se.ID+"/files/content", aliceKey, map[string]any{"path": "go", "content": ""}, nil); r.StatusCode != 200 {
		t.Fatalf("release: %d", r.StatusCode)
	}
	var final *result
	for ev := range events {
		seen = append(seen, ev)
		if ev.Event == "result" {
			final = &result{}
			if err := json.Unmarshal([]byte(ev.Data), final); err != nil {
				t.Fatal(err)
			}
		}
	}
	if final == nil || !final.Success || string(final.Result) != `"done"` || !strings.Contains(final.Stdout, "hi from the shell\n") || !strings.Contains(final.Stdout, "installed magiclib 1.2") {
		t.Fatalf("the run: %+v\nevents: %+v", final, seen)
	}
	// The slot is free again once the run is over, and what %pip
	// installed is there.
	var after result
	if resp := ts.call(t, "POST", "/sessions/"+se.ID+"/execute", aliceKey, map[string]any{"code": "import magiclib; magiclib.VALUE"}, &after); resp.StatusCode != 200 || string(after.Result) != `"magiclib 1.2"` {
		t.Fatalf("alice after her run: %d %+v", resp.StatusCode, after)
	}
}
