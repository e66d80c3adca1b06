package audit

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// droppedIn sums the counts the audit_dropped records report.
func droppedIn(t *testing.T, s Store) uint64 {
	t.Helper()
	evs, err := s.List(context.Background(), Query{Kind: KindAuditDropped})
	if err != nil {
		t.Fatal(err)
	}
	var sum uint64
	for _, ev := range evs {
		var n uint64
		if _, err := fmt.Sscanf(ev.Detail, "%d audit events dropped", &n); err != nil || n == 0 {
			t.Fatalf("audit_dropped detail %q: %v", ev.Detail, err)
		}
		sum += n
	}
	return sum
}

func TestAuditRecorderBurst(t *testing.T) {
	s, _ := openTemp(t)
	r := NewRecorder(s, 64, nil)
	const goroutines, perG = 16, 625
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range perG {
				r.Record(Event{Kind: KindExecute, ExecutionID: fmt.Sprintf("g%d-%d", g, i), Surface: "rest"})
			}
		}()
	}
	wg.Wait()
	ctx := context.Background()
	if err := r.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	written, dropped := r.Written(), r.Dropped()
	if written+dropped != goroutines*perG {
		t.Fatalf("written %d + dropped %d != %d", written, dropped, goroutines*perG)
	}
	if r.Errors() != 0 {
		t.Fatalf("%d store errors", r.Errors())
	}
	st, err := s.Stats(ctx, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	if uint64(st.ByKind[KindExecute]) != written {
		t.Fatalf("%d execute rows, Written() = %d", st.ByKind[KindExecute], written)
	}
	if got := droppedIn(t, s); got != dropped {
		t.Fatalf("audit_dropped records report %d, Dropped() = %d", got, dropped)
	}
	t.Logf("written %d, dropped %d, in %d audit_dropped records", written, dropped, st.ByKind[KindAuditDropped])
	if err := r.Close(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestAuditRecorderFlushMakesVisible(t *testing.T) {
	s, _ := openTemp(t)
	r := NewRecorder(s, 1024, nil)
	defer r.Close(context.Background())
	ctx := context.Background()
	for round := range 5 {
		for i := range 100 {
			r.Record(Event{Kind: KindExecute, ExecutionID: fmt.Sprintf("r%d-%d", round, i)})
		}
		if err := r.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		// Every event recorded before Flush is readable once it returns.
		evs, err := s.List(ctx, Query{})
		if err != nil {
			t.Fatal(err)
		}
		if len(evs) != (round+1)*100 {
			t.Fatalf("round %d: %d events visible after Flush", round, len(evs))
		}
		if _, err := s.Get(ctx, fmt.Sprintf("r%d-99", round)); err != nil {
			t.Fatalf("round %d: last event: %v", round, err)
		}
	}
	if r.Dropped() != 0 || r.Written() != 500 {
		t.Fatalf("written %d dropped %d", r.Written(), r.Dropped())
	}
}

func TestAuditRecorderKeepsEventTime(t *testing.T) {
	s, _ := openTemp(t)
	r := NewRecorder(s, 8, nil)
	before := time.Now()
	r.Record(Event{Kind: KindSession, ExecutionID: "now"})
	r.Record(Event{Kind: KindSession, ExecutionID: "then", Time: t0})
	if err := r.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	now, err := s.Get(context.Background(), "now")
	if err != nil {
		t.Fatal(err)
	}
	if now[0].Time.Before(before.Add(-time.Millisecond)) || now[0].Time.After(time.Now()) {
		t.Fatalf("zero Time recorded as %v", now[0].Time)
	}
	then, err := s.Get(context.Background(), "then")
	if err != nil || !then[0].Time.Equal(t0) {
		t.Fatalf("explicit Time recorded as %v (%v)", then, err)
	}
}

func TestAuditRecorderCloseThenRecord(t *testing.T) {
	s, _ := openTemp(t)
	r := NewRecorder(s, 16, nil)
	r.Record(Event{Kind: KindExecute, ExecutionID: "before"})
	ctx := context.Background()
	if err := r.Close(ctx); err != nil {
		t.Fatal(err)
	}
	// Close wrote what was buffered.
	if _, err := s.Get(ctx, "before"); err != nil {
		t.Fatalf("event recorded before Close: %v", err)
	}
	r.Record(Event{Kind: KindExecute, ExecutionID: "after"})
	if r.Dropped() != 1 || r.Written() != 1 {
		t.Fatalf("after Close: written %d dropped %d", r.Written(), r.Dropped())
	}
	if err := r.Flush(ctx); !errors.Is(err, ErrClosed) {
		t.Fatalf("Flush after Close = %v, want ErrClosed", err)
	}
	if err := r.Close(ctx); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}

func TestAuditRecorderCloseRacesRecord(t *testing.T) {
	s, _ := openTemp(t)
	r := NewRecorder(s, 32, nil)
	var wg sync.WaitGroup
	var recorded atomic.Uint64
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 500 {
				r.Record(Event{Kind: KindExecute})
				recorded.Add(1)
			}
		}()
	}
	time.Sleep(time.Millisecond)
	if err := r.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if r.Written()+r.Dropped() != recorded.Load() {
		t.Fatalf("written %d + dropped %d != recorded %d", r.Written(), r.Dropped(), recorded.Load())
	}
}

// flakyStore fails its first failures Appends.
type flakyStore struct {
	Store
	mu       sync.Mutex
	failures int
}

func (f *flakyStore) Append(ctx context.Context, evs []Event) error {
	f.mu.Lock()
	fail := f.failures > 0
	if fail {
		f.failures--
	}
	f.mu.Unlock()
	if fail {
		return errors.New("disk on fire")
	}
	return f.Store.Append(ctx, evs)
}

func TestAuditRecorderStoreErrors(t *testing.T) {
	s, _ := openTemp(t)
	ctx := context.Background()

	// One failure: the retry succeeds and nothing is lost.
	f := &flakyStore{Store: s, failures: 1}
	r := NewRecorder(f, 16, nil)
	r.Record(Event{Kind: KindExecute, ExecutionID: "retried"})
	if err := r.Flush(ctx); err != nil {
		t.Fatalf("Flush: %v", err)
	}
	if r.Errors() != 1 || r.Written() != 1 || r.Dropped() != 0 {
		t.Fatalf("errors %d written %d dropped %d", r.Errors(), r.Written(), r.Dropped())
	}

	// Two failures: the batch is dropped, and the next write says so.
	f.mu.Lock()
	f.failures = 2
	f.mu.Unlock()
	r.Record(Event{Kind: KindExecute, ExecutionID: "lost1"})
	r.Record(Event{Kind: KindExecute, ExecutionID: "lost2"})
	if err := r.Flush(ctx); err == nil {
		t.Fatal("Flush hid a failed write")
	}
	if r.Errors() != 3 || r.Dropped() != 2 {
		t.Fatalf("errors %d dropped %d", r.Errors(), r.Dropped())
	}
	if _, err := s.Get(ctx, "lost1"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("dropped event stored: %v", err)
	}
	r.Record(Event{Kind: KindExecute, ExecutionID: "after"})
	if err := r.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get(ctx, "after"); err != nil {
		t.Fatal(err)
	}
	if got := droppedIn(t, s); got != 2 {
		t.Fatalf("audit_dropped records report %d, want 2", got)
	}
}

func TestAuditRecorderReportsDropsWithoutNewEvents(t *testing.T) {
	s, _ := openTemp(t)
	block := make(chan struct{})
	r := NewRecorder(&blockingStore{Store: s, block: block}, 1, nil)
	// With the writer stuck, a few events are in its hands (those that
	// came within its gather window), one in the buffer, and the rest are
	// dropped; a Flush with nothing else to write must still put the drops
	// on record.
	for range 100 {
		r.Record(Event{Kind: KindExecute})
	}
	close(block)
	ctx := context.Background()
	if err := r.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if r.Dropped() < 90 || r.Written()+r.Dropped() != 100 {
		t.Fatalf("written %d dropped %d", r.Written(), r.Dropped())
	}
	if got := droppedIn(t, s); got != r.Dropped() {
		t.Fatalf("audit_dropped records report %d, Dropped() = %d", got, r.Dropped())
	}
	if err := r.Close(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestAuditRecorderFlushHonoursContext(t *testing.T) {
	s, _ := openTemp(t)
	block := make(chan struct{})
	r := NewRecorder(&blockingStore{Store: s, block: block}, 4, nil)
	r.Record(Event{Kind: KindExecute})
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := r.Flush(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Flush on a stuck store = %v", err)
	}
	close(block)
	if err := r.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if r.Written() != 1 {
		t.Fatalf("written %d", r.Written())
	}
}

type blockingStore struct {
	Store
	block chan struct{}
}

func (b *blockingStore) Append(ctx context.Context, evs []Event) error {
	<-b.block
	return b.Store.Append(ctx, evs)
}
