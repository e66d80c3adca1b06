package cli

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/codecage/codecage/internal/pgtest"
)

// post sends a REST call as alice and fails the benchmark on anything
// but 200.
func post(b *testing.B, url string, body any) {
	data, _ := json.Marshal(body)
	req, _ := http.NewRequest("POST", url, bytes.NewReader(data))
	req.Header.Set("Authorization", "Bearer "+aliceKey)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		b.Fatal(err)
	}
	out, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		b.Fatalf("%s: %d %s", url, resp.StatusCode, out)
	}
}

func p50(ds []time.Duration) time.Duration {
	sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
	return ds[len(ds)/2]
}

// BenchmarkClusterForwarding: one session call answered by the replica
// that holds the session, against the same call through another replica,
// which forwards it. Reports both p50s and their difference.
//
//	go test ./internal/cli -run '^$' -bench ClusterForwarding -benchtime 300x
func BenchmarkClusterForwarding(b *testing.B) {
	pg := pgtest.Start(b)
	rs := startReplicas(b, pg.DSN(), 2, "SANDBOX_RATE_LIMIT=0")
	_, info := call(b, "POST", rs[0].url+"/sessions", aliceKey, map[string]any{})
	id := info["session_id"].(string)
	body := map[string]any{"session_id": id, "code": "1"}
	for range 20 { // warm both paths (connections, the registry's copy)
		post(b, rs[0].url+"/execute", body)
		post(b, rs[1].url+"/execute", body)
	}
	local := make([]time.Duration, 0, b.N)
	forwarded := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for range b.N {
		start := time.Now()
		post(b, rs[0].url+"/execute", body)
		local = append(local, time.Since(start))
		start = time.Now()
		post(b, rs[1].url+"/execute", body)
		forwarded = append(forwarded, time.Since(start))
	}
	b.StopTimer()
	l, f := p50(local), p50(forwarded)
	b.ReportMetric(float64(l.Microseconds())/1000, "local-p50-ms")
	b.ReportMetric(float64(f.Microseconds())/1000, "forwarded-p50-ms")
	b.ReportMetric(float64((f-l).Microseconds())/1000, "overhead-p50-ms")
}

// BenchmarkClusterThroughput: stateless print(1) runs per second from 8
// clients spread round robin over 1, 2 and 3 replicas on this machine.
//
//	go test ./internal/cli -run '^$' -bench ClusterThroughput -benchtime 600x
func BenchmarkClusterThroughput(b *testing.B) {
	pg := pgtest.Start(b)
	for _, n := range []int{1, 2, 3} {
		b.Run(fmt.Sprintf("replicas=%d", n), func(b *testing.B) {
			rs := startReplicas(b, pg.DSN(), n, "SANDBOX_RATE_LIMIT=0")
			for _, r := range rs {
				for range 10 {
					post(b, r.url+"/execute", map[string]any{"code": "print(1)"})
				}
			}
			const clients = 8
			var next atomic.Int64
			var wg sync.WaitGroup
			b.ResetTimer()
			start := time.Now()
			for range clients {
				wg.Go(func() {
					for {
						i := next.Add(1)
						if i > int64(b.N) {
							return
						}
						post(b, rs[int(i)%n].url+"/execute", map[string]any{"code": "print(1)"})
					}
				})
			}
			wg.Wait()
			b.StopTimer()
			b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "runs/s")
		})
	}
}
