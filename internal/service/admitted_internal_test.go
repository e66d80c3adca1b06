package service

import (
	"context"
	"errors"
	"testing"

	"github.com/codecage/codecage/internal/access"
)

// A call an admitted request makes for itself is admitted within it, one
// at a time: a second one while the first runs is refused (a run's calls
// never become parallel work past the key's limit), and the lent slot is
// free again once the first is released. A context without an admitted
// request gets nothing lent.
func TestAdmittedRequestLendsItsSlotOneCallAtATime(t *testing.T) {
	s := &Service{} // admission within a request touches nothing of the service's
	ctx := withAdmission(WithCaller(context.Background(), Caller{Key: "alice"}))
	if withAdmission(ctx) != ctx {
		t.Fatal("a call's context got a slot of its own to lend")
	}
	first, err := s.admit(ctx, true)
	if err != nil {
		t.Fatalf("the first call of an admitted request: %v", err)
	}
	if _, err := s.admit(ctx, true); !errors.Is(err, access.ErrKeyConcurrency) {
		t.Fatalf("a second call while the first runs: %v, want a refusal", err)
	}
	if _, err := s.admit(ctx, false); !errors.Is(err, access.ErrKeyConcurrency) {
		t.Fatalf("a light call while the first runs: %v, want a refusal", err)
	}
	first()
	first() // twice is once
	again, err := s.admit(ctx, true)
	if err != nil {
		t.Fatalf("a call after the first ended: %v", err)
	}
	again()
	if _, ok, _ := admitWithin(context.Background()); ok {
		t.Fatal("a context without an admitted request was admitted within one")
	}
}
