package httpapi_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"
)

// BenchmarkRESTStreamLines is the streamed output path: a run printing
// 100,000 lines to a REST event stream read as fast as it comes. It
// reports lines/s end to end (run start to result event).
func BenchmarkRESTStreamLines(b *testing.B) {
	ts := startServer(b, "", nil)
	const lines = 100000
	body, _ := json.Marshal(map[string]any{"code": "import sys\nfor i in range(100000):\n    sys.stdout.write('line %d\\n' % i)\n", "timeout": 60})
	streamed := 0
	b.ResetTimer()
	start := time.Now()
	for range b.N {
		req, _ := http.NewRequest("POST", ts.URL+"/execute", strings.NewReader(string(body)))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "text/event-stream")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		events := make(chan sseEvent, 256)
		go readEvents(resp.Body, events)
		n := 0
		for ev := range events {
			if ev.Event == "stdout" {
				n++
			}
		}
		resp.Body.Close()
		streamed += n
		if n < lines/2 {
			b.Fatalf("%d lines streamed of %d", n, lines)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N*lines)/time.Since(start).Seconds(), "lines/s")
	b.ReportMetric(float64(streamed)/float64(b.N*lines), "streamed/printed")
}
