package session

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/codecage/codecage/internal/config"
)

// These tests need no sandbox at all: they check the table's bookkeeping.
// The sessions themselves (started, run, paused, restarted, expired,
// dropped) are tested on stand-in sandboxes (fake_test.go), and through
// the service on real ones, in internal/service.

// TestGetByIDAndOwner: a session is found by its id and its owner only;
// another owner's is not found, with the id quoted (and capped).
func TestGetByIDAndOwner(t *testing.T) {
	tab := NewTable(config.DefaultConfig(), Options{})
	se := &Session{id: "s1", owner: "key:alice"}
	tab.byID[se.id] = se
	if got, err := tab.Get("s1", "key:alice"); err != nil || got != se {
		t.Fatalf("Get(own) = %v, %v", got, err)
	}
	for _, c := range []struct{ id, owner string }{{"s1", "key:bob"}, {"s1", ""}, {"s2", "key:alice"}, {strings.Repeat("x", 1000), "key:alice"}} {
		_, err := tab.Get(c.id, c.owner)
		if !errors.Is(err, ErrNotFound) {
			t.Errorf("Get(%.20q, %q) = %v, want ErrNotFound", c.id, c.owner, err)
		}
		if err != nil && len(err.Error()) > 200 {
			t.Errorf("the error quotes the whole id: %d bytes", len(err.Error()))
		}
	}
	if n := tab.Count(); n != 1 {
		t.Errorf("Count = %d, want 1", n)
	}
	if l := tab.List("key:bob"); len(l) != 0 {
		t.Errorf("List(other owner) = %v", l)
	}
}

// TestCreatePastMaxSessions: with SANDBOX_MAX_SESSIONS open, Create is
// refused before any sandbox or workspace is made.
func TestCreatePastMaxSessions(t *testing.T) {
	cfg := config.DefaultConfig()
	cfg.MaxSessions = 1
	cfg.StateDir = t.TempDir()
	tab := NewTable(cfg, Options{NewID: func() string { return "unused" }})
	tab.byID["s1"] = &Session{id: "s1"}
	_, err := tab.Create(context.Background(), Request{Owner: "o"}, Shape{Backend: "native"})
	if !errors.Is(err, ErrTooMany) || !strings.Contains(err.Error(), "SANDBOX_MAX_SESSIONS") {
		t.Fatalf("Create past the limit: %v, want ErrTooMany naming SANDBOX_MAX_SESSIONS", err)
	}
	if n := tab.Count(); n != 1 {
		t.Errorf("Count = %d after a refused create, want 1", n)
	}
}
