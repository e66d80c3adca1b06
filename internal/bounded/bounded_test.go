package bounded

import (
	"strings"
	"sync"
	"testing"
	"unicode/utf8"
)

func TestBoundedString(t *testing.T) {
	if got := String("short", 10); got != "short" {
		t.Fatalf("short: %q", got)
	}
	big := strings.Repeat("x", 4<<20)
	got := String(big, 256)
	if len(got) > 256 || !strings.HasPrefix(got, "xxx") || !strings.HasSuffix(got, "… (4194304 bytes)") {
		t.Fatalf("4 MiB capped to %d bytes: %q", len(got), got)
	}
	// A cut inside a multi-byte character backs up to its start.
	for max := 20; max < 30; max++ {
		got := String(strings.Repeat("é", 100), max)
		if len(got) > max || !utf8.ValidString(got) {
			t.Fatalf("max %d: %q (%d bytes)", max, got, len(got))
		}
	}
	if got := String(big, 3); got != "… (4194304 bytes)" {
		t.Fatalf("max below the marker: %q", got)
	}
}

func TestBoundedQuota(t *testing.T) {
	q := NewQuota(32)
	var wg sync.WaitGroup
	var mu sync.Mutex
	taken := 0
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 125 {
				if q.Take() {
					mu.Lock()
					taken++
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	if taken != 32 || q.More() != 968 || q.Summary("refused calls") != "and 968 more refused calls" {
		t.Fatalf("taken %d, more %d, summary %q", taken, q.More(), q.Summary("refused calls"))
	}
	if s := NewQuota(5).Summary("x"); s != "" {
		t.Fatalf("nothing turned away: %q", s)
	}
	z := NewQuota(0)
	if z.Take() || z.More() != 1 {
		t.Fatal("a quota of none let an item through")
	}
}
