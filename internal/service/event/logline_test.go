package event

import (
	"testing"
	"time"
)

// A request's event reads in its session's log at the level its outcome
// says, without the session's own id, and a session's lifecycle going
// well is left to the session table.
func TestLogLine(t *testing.T) {
	for _, c := range []struct {
		ev           Event
		level, msg   string
		ok           bool
		code, detail string
	}{
		{Event{Kind: "execute", Action: "session:s1", Outcome: "success", Code: "1"}, "info", "execute: success", true, "1", ""},
		{Event{Kind: "execute", Action: "session:s1", Outcome: "error", Detail: "ZeroDivisionError"}, "warn", "execute: error", true, "", "ZeroDivisionError"},
		{Event{Kind: "command", Outcome: "timeout", Limit: "timeout"}, "error", "command: timeout", true, "", ""},
		{Event{Kind: "file", Action: "write", Outcome: "too_large"}, "error", "file write: too_large", true, "", ""},
		{Event{Kind: EventSession, Action: "pause", Outcome: "success"}, "", "", false, "", ""},
		{Event{Kind: EventSession, Action: "pause", Outcome: "conflict"}, "error", "session pause: conflict", true, "", ""},
	} {
		c.ev.Duration = 1500 * time.Millisecond
		level, msg, fields, ok := LogLine(c.ev, "s1")
		if level != c.level || msg != c.msg || ok != c.ok {
			t.Errorf("%+v: %q %q %v, want %q %q %v", c.ev, level, msg, ok, c.level, c.msg, c.ok)
			continue
		}
		if ok && (fields["code"] != c.code || fields["detail"] != c.detail || fields["duration_ms"] != "1500") {
			t.Errorf("%+v: fields %v", c.ev, fields)
		}
	}
}
