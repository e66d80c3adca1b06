package e2b_test

import (
	"encoding/json"
	"strings"
	"testing"
)

// v1's log lines are JSON records, as envd writes them: the E2B CLI's
// `e2b sandbox logs` parses each (level, logger, message, the fields),
// and a line that is not JSON fails the whole command.
func TestV1LogLinesAreJSONRecords(t *testing.T) {
	srv, _ := newServer(t)
	b := createBox(t, srv, `{"timeout": 60}`)
	b.run("import sys\nsys.stderr.write('to the log')\n1/0")
	status, out := ctl(t, srv, "GET", "/sandboxes/"+b.id+"/logs", "")
	logs, _ := out["logs"].([]any)
	if status != 200 || len(logs) < 2 {
		t.Fatalf("v1 logs: %d %v", status, out)
	}
	var said []string
	for _, l := range logs {
		line, _ := l.(map[string]any)["line"].(string)
		var record map[string]string
		if err := json.Unmarshal([]byte(line), &record); err != nil || record["level"] == "" || record["logger"] == "" {
			t.Fatalf("a line that is no record: %q (%v)", line, err)
		}
		said = append(said, record["level"]+" "+record["message"])
	}
	if got := strings.Join(said, "\n"); !strings.Contains(got, "info session started") || !strings.Contains(got, "warn stderr: to the log") {
		t.Errorf("the records:\n%s", got)
	}
}
