package api_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/codecage/codecage/internal/api"
	"github.com/codecage/codecage/internal/service"
)

func ptr[T any](v T) *T { return &v }

func TestSessionParamsOfPersistence(t *testing.T) {
	for _, c := range []struct {
		p      api.SessionParams
		manual bool
		onT    string
	}{
		{api.SessionParams{}, false, ""},
		{api.SessionParams{AutoResume: ptr(true), OnTimeout: "kill"}, false, "kill"},
		{api.SessionParams{AutoResume: ptr(false), OnTimeout: "pause", FromSnapshot: "snap1"}, true, "pause"},
	} {
		r, err := c.p.Request("key:alice")
		if err != nil || r.ManualResume != c.manual || r.OnTimeout != c.onT || r.FromSnapshot != c.p.FromSnapshot {
			t.Errorf("%+v: %+v, %v", c.p, r, err)
		}
	}
	if _, err := (api.SessionParams{OnTimeout: "sleep"}).Request(""); !errors.Is(err, service.ErrInvalidRequest) {
		t.Errorf("on_timeout sleep: %v", err)
	}
}

// TestSessionParamsLifetime: lifetime (seconds) reaches the request; out
// of range is refused before anything starts.
func TestSessionParamsLifetime(t *testing.T) {
	if r, err := (api.SessionParams{Lifetime: 2.5, OnTimeout: "pause"}).Request(""); err != nil || r.Lifetime != 2500*time.Millisecond {
		t.Errorf("lifetime 2.5: %v %v", r.Lifetime, err)
	}
	if r, err := (api.SessionParams{}).Request(""); err != nil || r.Lifetime != 0 {
		t.Errorf("no lifetime: %v %v", r.Lifetime, err)
	}
	for _, bad := range []float64{-1, 86401} {
		if _, err := (api.SessionParams{Lifetime: bad}).Request(""); !errors.Is(err, service.ErrInvalidRequest) {
			t.Errorf("lifetime %g: %v", bad, err)
		}
	}
}

func TestForkParamsBounds(t *testing.T) {
	if n, life, err := (api.ForkParams{}).Fork(); n != 1 || life != 0 || err != nil {
		t.Errorf("defaults: %d %v %v", n, life, err)
	}
	if n, life, err := (api.ForkParams{Count: ptr(service.MaxForks), Lifetime: 1.5}).Fork(); n != service.MaxForks || life != 1500*time.Millisecond || err != nil {
		t.Errorf("count %d: %d %v %v", service.MaxForks, n, life, err)
	}
	for _, p := range []api.ForkParams{{Count: ptr(0)}, {Count: ptr(-1)}, {Count: ptr(service.MaxForks + 1)}, {Lifetime: -1}, {Lifetime: 1e12}} {
		if _, _, err := p.Fork(); !errors.Is(err, service.ErrInvalidRequest) {
			t.Errorf("%+v: %v", p, err)
		}
	}
}

func TestSnapshotNameChecked(t *testing.T) {
	if n, err := (api.SnapshotParams{Name: "nightly 2026-11-26 é"}).Check(); err != nil || n != "nightly 2026-11-26 é" {
		t.Errorf("a plain name: %q %v", n, err)
	}
	for _, name := range []string{strings.Repeat("a", service.MaxSnapshotName+1), "a\nb", "a\x00", "\xff"} {
		if _, err := (api.SnapshotParams{Name: name}).Check(); !errors.Is(err, service.ErrInvalidRequest) {
			t.Errorf("name %q: %v", name, err)
		}
	}
	if !(api.PauseParams{}).Keep() || !(api.PauseParams{KeepMemory: ptr(true)}).Keep() || (api.PauseParams{KeepMemory: ptr(false)}).Keep() {
		t.Error("keep_memory: the default is true, false is false")
	}
}
