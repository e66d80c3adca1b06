package session

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

// A session's log keeps the newest MaxLogEntries entries, reads them in
// either direction from a cursor, filters by level and text, and stores
// what the code chose capped and valid.
func TestSessionLogRingAndQueries(t *testing.T) {
	var l sessionLog
	for i := range MaxLogEntries + 10 {
		level := LevelInfo
		if i%2 == 1 {
			level = LevelError
		}
		l.add(level, fmt.Sprintf("entry %03d", i), nil)
	}
	all := l.read(LogQuery{})
	if len(all) != MaxLogEntries || all[0].Message != "entry 010" || all[len(all)-1].Message != "entry 265" {
		t.Fatalf("%d entries, first %q, last %q", len(all), all[0].Message, all[len(all)-1].Message)
	}
	for i := 1; i < len(all); i++ {
		if all[i].Time.Before(all[i-1].Time) {
			t.Fatalf("entry %d is older than the one before it", i)
		}
	}
	back := l.read(LogQuery{Backward: true, Limit: 3})
	if len(back) != 3 || back[0].Message != "entry 265" || back[2].Message != "entry 263" {
		t.Errorf("backward: %v", back)
	}
	if errs := l.read(LogQuery{MinLevel: LevelWarn}); len(errs) != MaxLogEntries/2 || errs[0].Level != LevelError {
		t.Errorf("errors only: %d, first %v", len(errs), errs[0])
	}
	if got := l.read(LogQuery{Search: "entry 2"}); len(got) != 66 {
		t.Errorf("search: %d entries", len(got))
	}
	// A cursor: nothing after the future, everything before it.
	future := time.Now().Add(time.Hour)
	if got := l.read(LogQuery{Cursor: future}); len(got) != 0 {
		t.Errorf("after a future cursor: %d", len(got))
	}
	if got := l.read(LogQuery{Cursor: future, Backward: true, Limit: 5000}); len(got) != MaxLogEntries {
		t.Errorf("before a future cursor: %d", len(got))
	}
	// What the code chose: 4 MiB, invalid UTF-8, many fields.
	fields := map[string]string{}
	for i := range 20 {
		fields["k"+strconv.Itoa(i)] = strings.Repeat("v", 10000)
	}
	l.add(LevelWarn, strings.Repeat("x", 4<<20)+"\xff", fields)
	l.add(LevelWarn, "bad \xff\xfe bytes", nil)
	got := l.read(LogQuery{Backward: true, Limit: 2})
	big, bad := got[1], got[0]
	if len(big.Message) > MaxLogMessage || !strings.HasSuffix(big.Message, "(4194305 bytes)") || len(big.Fields) != MaxLogFields {
		t.Errorf("a 4 MiB entry is kept as %d bytes, %d fields", len(big.Message), len(big.Fields))
	}
	for k, v := range big.Fields {
		if len(v) > MaxLogField {
			t.Errorf("field %s holds %d bytes", k, len(v))
		}
	}
	if !utf8.ValidString(bad.Message) || !strings.Contains(bad.Message, "\uFFFD") {
		t.Errorf("invalid UTF-8 kept as %q", bad.Message)
	}
}
