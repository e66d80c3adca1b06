package httpapi_test

import (
	"bytes"
	"io"
	"net/http"
	"runtime/metrics"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/codecage/codecage/internal/config"
)

// BenchmarkRESTExecute is POST /execute of print(1) from 8 clients through
// the whole in-process stack (REST, metrics, the audit log on SQLite, the
// service, the fleet): run it with -cpuprofile to see where the
// supervisor's CPU goes (the clients' share is in the profile too). It
// also counts the goroutines created per run (clients included): a
// measure of the scheduler's work that the host's noise does not blur as
// it does CPU time.
func BenchmarkRESTExecute(b *testing.B) {
	ts := startServer(b, "", func(c *config.Config) { c.PoolSize = 4 })
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 16}}
	do := func() {
		resp, err := client.Post(ts.URL+"/execute", "application/json", bytes.NewReader([]byte(`{"code":"print(1)"}`)))
		if err != nil {
			b.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || !bytes.Contains(body, []byte(`"stdout":"1\n"`)) {
			b.Fatalf("%d %s", resp.StatusCode, body)
		}
	}
	for range 10 {
		do()
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	created0 := goroutinesCreated()
	b.ResetTimer()
	start := time.Now()
	for range 8 {
		wg.Go(func() {
			for next.Add(1) <= int64(b.N) {
				do()
			}
		})
	}
	wg.Wait()
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "runs/s")
	b.ReportMetric(float64(goroutinesCreated()-created0)/float64(b.N), "goroutines/run")
}

// goroutinesCreated is how many goroutines this process has created.
func goroutinesCreated() uint64 {
	s := []metrics.Sample{{Name: "/sched/goroutines-created:goroutines"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}
