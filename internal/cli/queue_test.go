package cli

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// burst sends n concurrent POST /execute of code and returns the answers'
// statuses, bodies and Retry-After headers.
func burst(t *testing.T, url string, n int, code string) (statuses []int, bodies, retry []string) {
	t.Helper()
	statuses, bodies, retry = make([]int, n), make([]string, n), make([]string, n)
	body, _ := json.Marshal(map[string]any{"code": code})
	client := &http.Client{Timeout: 90 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: n}}
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			resp, err := client.Post(url+"/execute", "application/json", strings.NewReader(string(body)))
			if err != nil {
				bodies[i] = err.Error()
				return
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
			statuses[i], bodies[i], retry[i] = resp.StatusCode, string(b), resp.Header.Get("Retry-After")
		}()
	}
	close(start)
	wg.Wait()
	return statuses, bodies, retry
}

// TestServeWithoutKeysQueuesABurst: a server without API keys has one
// caller, its operator; a burst of 100 concurrent executions (an
// evaluation loop) with 4 running at once waits in the queue and every
// one succeeds, none refused for a per-key limit.
func TestServeWithoutKeysQueuesABurst(t *testing.T) {
	s := startServe(t, "SANDBOX_STATE_DIR="+t.TempDir(), "SANDBOX_MAX_CONCURRENT=4", "SANDBOX_QUEUE_SIZE=128", "SANDBOX_QUEUE_TIMEOUT=80",
		"SANDBOX_POOL_SIZE=2", "SANDBOX_SESSION_POOL_SIZE=0", "SANDBOX_MACHINE_POOL_SIZE=0")
	statuses, bodies, _ := burst(t, s.url, 100, "print(6*7)")
	failed := 0
	for i, st := range statuses {
		if st != 200 || !strings.Contains(bodies[i], `"stdout":"42\n"`) {
			if failed++; failed <= 3 {
				t.Errorf("request %d: %d %.300s", i, st, bodies[i])
			}
		}
	}
	if failed > 0 {
		t.Fatalf("%d of 100 queued requests failed", failed)
	}
}

// TestServeWithoutKeysBoundsTheQueue: beyond the running slots and the
// queue, a burst is refused at once with 503, Retry-After and a message
// that names the limits; nothing is refused before the queue is full.
func TestServeWithoutKeysBoundsTheQueue(t *testing.T) {
	s := startServe(t, "SANDBOX_STATE_DIR="+t.TempDir(), "SANDBOX_MAX_CONCURRENT=2", "SANDBOX_QUEUE_SIZE=6", "SANDBOX_QUEUE_TIMEOUT=60",
		"SANDBOX_POOL_SIZE=2", "SANDBOX_SESSION_POOL_SIZE=0", "SANDBOX_MACHINE_POOL_SIZE=0")
	start := time.Now()
	statuses, bodies, retry := burst(t, s.url, 30, "import time\ntime.sleep(2)\nprint('done')")
	ok, busy := 0, 0
	for i, st := range statuses {
		switch {
		case st == 200 && strings.Contains(bodies[i], `"stdout":"done\n"`):
			ok++
		case st == 503 && retry[i] != "" && strings.Contains(bodies[i], "server busy") && strings.Contains(bodies[i], "queued"):
			busy++
		default:
			t.Errorf("request %d: %d (Retry-After %q) %.300s", i, st, retry[i], bodies[i])
		}
	}
	// 2 running + 6 queued are served; the 22 others are refused at once.
	if ok != 8 || busy != 22 {
		t.Fatalf("served %d, refused busy %d (want 8 and 22) in %s", ok, busy, time.Since(start))
	}
}
