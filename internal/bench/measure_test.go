package bench

import (
	"context"
	"fmt"
	"testing"
	"time"
)

func TestMeasureCountsFailures(t *testing.T) {
	row := measure(context.Background(), "k", "case", 10, 3, func(_ context.Context, i int) string {
		time.Sleep(time.Millisecond)
		if i%2 == 1 {
			return fmt.Sprintf("run %d failed", i)
		}
		return ""
	})
	if row.Runs != 10 || row.Errors != 5 || row.FirstError == "" || row.Clients != 3 {
		t.Fatalf("row %+v", row)
	}
	if row.P50 < 1 || row.Throughput <= 0 {
		t.Fatalf("latency %+v", row)
	}
}

func TestMeasureBeforeFailureIsAnError(t *testing.T) {
	ran := 0
	row := measureWith(context.Background(), "k", "case", 4, 1,
		func(context.Context) error { return fmt.Errorf("pool never filled") },
		func(context.Context, int) string { ran++; return "" })
	if ran != 0 || row.Errors != 4 || row.FirstError != "pool never filled" {
		t.Fatalf("ran %d, row %+v", ran, row)
	}
}

func TestPercentile(t *testing.T) {
	var d []time.Duration
	for i := 1; i <= 100; i++ {
		d = append(d, time.Duration(i)*time.Millisecond)
	}
	for p, want := range map[float64]time.Duration{50: 50, 95: 95, 99: 99, 100: 100, 1: 1} {
		if got := percentile(d, p); got != want*time.Millisecond {
			t.Errorf("p%v = %v, want %v", p, got, want*time.Millisecond)
		}
	}
	if got := percentile(d[:1], 99); got != time.Millisecond {
		t.Errorf("p99 of one = %v", got)
	}
}
