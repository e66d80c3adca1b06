package access

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestParseKeys(t *testing.T) {
	k, err := ParseKeys(" alice:0123456789abcdef , bob:fedcba9876543210fedc")
	if err != nil || k.Len() != 2 {
		t.Fatalf("%v %d", err, k.Len())
	}
	if name, ok := k.Lookup("0123456789abcdef"); !ok || name != "alice" {
		t.Fatalf("lookup alice: %q %v", name, ok)
	}
	for _, bad := range []string{"", "0123456789abcde", "0123456789abcdef0", "Bearer 0123456789abcdef"} {
		if name, ok := k.Lookup(bad); ok {
			t.Errorf("%q matched %s", bad, name)
		}
	}
	if got := strings.Join(k.Names(), ","); got != "alice,bob" {
		t.Fatalf("names %s", got)
	}
	for spec, want := range map[string]string{
		"alice":                                 "name:key",
		"alice:short":                           "at least 16",
		"al ice:0123456789abcdef":               "use letters",
		"a:0123456789abcdef,a:0123456789abcdeg": "appears twice",
		"a:0123456789abcdef,b:0123456789abcdef": "same key",
		":0123456789abcdef":                     "name:key",
	} {
		if _, err := ParseKeys(spec); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want %q", spec, err, want)
		}
	}
	var none *Keys
	if _, ok := none.Lookup("x"); ok || none.Len() != 0 {
		t.Fatal("nil keys matched")
	}
}

func TestLoadKeysFile(t *testing.T) {
	p := filepath.Join(t.TempDir(), "keys")
	os.WriteFile(p, []byte("# ops keys\n\nci:0123456789abcdef0123\n  agent : abcdefabcdefabcdef \n"), 0o600)
	k, err := LoadKeysFile(p)
	if err != nil || k.Len() != 2 {
		t.Fatalf("%v", err)
	}
	if name, _ := k.Lookup("abcdefabcdefabcdef"); name != "agent" {
		t.Fatalf("agent: %q", name)
	}
	os.WriteFile(p, []byte("ok:0123456789abcdef0123\nbroken\n"), 0o600)
	if _, err := LoadKeysFile(p); err == nil || !strings.Contains(err.Error(), ":2:") {
		t.Fatalf("line number missing: %v", err)
	}
	if _, err := LoadKeysFile(filepath.Join(t.TempDir(), "none")); err == nil {
		t.Fatal("missing file accepted")
	}
	base, _ := ParseKeys("x:0123456789abcdef0123")
	if err := base.Merge(base); err == nil {
		t.Fatal("merging duplicates accepted")
	}
}

func TestGateRate(t *testing.T) {
	g := NewGate(Limits{Rate: 1, Burst: 2})
	for i := range 2 {
		if err := g.Allow("a"); err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
	}
	err := g.Allow("a")
	if !errors.Is(err, ErrRateLimited) || RetryAfter(err) < time.Second {
		t.Fatalf("third request: %v (retry after %v)", err, RetryAfter(err))
	}
	if err := g.Allow("b"); err != nil {
		t.Fatalf("another key: %v", err)
	}
	// A refusal spends nothing: after the refill time one more passes.
	time.Sleep(1100 * time.Millisecond)
	if err := g.Allow("a"); err != nil {
		t.Fatalf("after refill: %v", err)
	}
	if RetryAfter(errors.New("other")) != 0 {
		t.Fatal("retry after for a plain error")
	}
}

func TestGateConcurrency(t *testing.T) {
	g := NewGate(Limits{PerKey: 2, Global: 3, Queue: 1, QueueTimeout: 200 * time.Millisecond})
	ctx := context.Background()
	r1, err := g.Acquire(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	r2, _ := g.Acquire(ctx, "a")
	if _, err := g.Acquire(ctx, "a"); !errors.Is(err, ErrKeyConcurrency) {
		t.Fatalf("third for a: %v", err)
	}
	r3, err := g.Acquire(ctx, "b")
	if err != nil || g.Running() != 3 {
		t.Fatalf("b: %v, running %d", err, g.Running())
	}
	// Global slots full: one may wait, and gets the slot a release frees.
	got := make(chan error, 1)
	go func() {
		rel, err := g.Acquire(ctx, "c")
		if err == nil {
			defer rel()
		}
		got <- err
	}()
	for g.Waiting() != 1 {
		time.Sleep(time.Millisecond)
	}
	if _, err := g.Acquire(ctx, "d"); !errors.Is(err, ErrQueueFull) {
		t.Fatalf("queue full: %v", err)
	}
	r1()
	r1() // releasing twice is harmless
	if err := <-got; err != nil {
		t.Fatalf("queued request: %v", err)
	}
	// The wait is bounded.
	r4, _ := g.Acquire(ctx, "a")
	if _, err := g.Acquire(ctx, "e"); !errors.Is(err, ErrQueueFull) || g.Waiting() != 0 {
		t.Fatalf("timed out wait: %v (waiting %d)", err, g.Waiting())
	}
	// A canceled wait leaves nothing held.
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := g.Acquire(cctx, "f"); !errors.Is(err, context.Canceled) {
		t.Fatalf("canceled: %v", err)
	}
	r2()
	r3()
	r4()
	if g.Running() != 0 || g.Waiting() != 0 {
		t.Fatalf("running %d waiting %d", g.Running(), g.Waiting())
	}
}
