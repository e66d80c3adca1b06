package audit

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"
)

// Every field of a recorded event reaches the database capped, with the
// original length in its marker, however large the value handed in: the
// audit layer's last line of defence against a flood through any caller.
func TestAuditRecorderCapsEveryField(t *testing.T) {
	s, _ := openTemp(t)
	r := NewRecorder(s, 16, nil).LimitCode(64 << 10)
	huge := strings.Repeat("x", 4<<20)
	many := make([]string, 1000)
	for i := range many {
		many[i] = fmt.Sprintf("tool_denied:%d%s", i, huge[:1000])
	}
	r.Record(Event{Kind: huge, ExecutionID: "cap-1", Key: huge, Surface: huge, Profile: huge, CodeHash: huge,
		Code: strings.Repeat("é", 2<<20), Outcome: huge, Limit: huge, Detail: huge, RemoteAddr: huge,
		Backend: huge, Replica: huge, SecurityEvents: many})
	r.Record(Event{Kind: KindExecute, ExecutionID: "cap-2", Code: "print(1)", Detail: "ok", SecurityEvents: []string{"egress_denied:a.example"}})
	if err := r.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	evs, err := s.Get(context.Background(), "cap-1")
	if err != nil || len(evs) != 1 {
		t.Fatalf("get: %v %d", err, len(evs))
	}
	ev := evs[0]
	marker := "… (4194304 bytes)"
	for name, v := range map[string]string{"kind": ev.Kind, "key": ev.Key, "surface": ev.Surface, "profile": ev.Profile,
		"code_hash": ev.CodeHash, "outcome": ev.Outcome, "limit": ev.Limit, "remote_addr": ev.RemoteAddr,
		"backend": ev.Backend, "replica": ev.Replica} {
		if len(v) > MaxField || !strings.HasSuffix(v, marker) {
			t.Errorf("%s: %d bytes, ends %q", name, len(v), v[max(0, len(v)-40):])
		}
	}
	if len(ev.Detail) > MaxDetail || !strings.HasSuffix(ev.Detail, marker) {
		t.Errorf("detail: %d bytes", len(ev.Detail))
	}
	if len(ev.Code) > 64<<10 || !utf8.ValidString(ev.Code) || !strings.HasSuffix(ev.Code, "… (4194304 bytes)") {
		t.Errorf("code: %d bytes, valid UTF-8 %v", len(ev.Code), utf8.ValidString(ev.Code))
	}
	if n := len(ev.SecurityEvents); n != MaxSecurityEvents || ev.SecurityEvents[n-1] != "… and 937 more" {
		t.Errorf("%d security events, last %q", n, ev.SecurityEvents[len(ev.SecurityEvents)-1])
	}
	for _, se := range ev.SecurityEvents {
		if len(se) > MaxField {
			t.Fatalf("a security event of %d bytes", len(se))
		}
	}
	// What is within bounds is kept as it came.
	evs, err = s.Get(context.Background(), "cap-2")
	if err != nil || len(evs) != 1 || evs[0].Code != "print(1)" || evs[0].Detail != "ok" ||
		len(evs[0].SecurityEvents) != 1 || evs[0].SecurityEvents[0] != "egress_denied:a.example" {
		t.Fatalf("a small event changed: %v %+v", err, evs)
	}
}

// BenchmarkAuditCapEvent is what capping adds to each Record of a typical
// event (nothing to cut).
func BenchmarkAuditCapEvent(b *testing.B) {
	ev := Event{Kind: KindExecute, ExecutionID: "e-0123456789", Key: "alice", Surface: "rest", Profile: "basic",
		CodeHash: HashCode("print(1)"), Code: "print(1)", Outcome: "success", Detail: "ImportError: socket",
		SecurityEvents: []string{"import_denied:socket"}, Backend: "native"}
	b.ReportAllocs()
	for b.Loop() {
		ev = capEvent(ev, DefaultMaxCode)
	}
}
