package cli

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
)

// createE2BSandbox makes an E2B sandbox of the base template through the
// E2B listener at e2bURL, as key, and returns the create answer (the
// sandbox's id and tokens); anything but 201 fails the test.
func createE2BSandbox(t *testing.T, e2bURL, key string, timeout int) map[string]any {
	t.Helper()
	req, _ := http.NewRequest("POST", e2bURL+"/v2/sandboxes", strings.NewReader(fmt.Sprintf(`{"templateID": "base", "timeout": %d}`, timeout)))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-API-KEY", key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var created map[string]any
	_ = json.NewDecoder(resp.Body).Decode(&created)
	resp.Body.Close()
	if resp.StatusCode != 201 {
		t.Fatalf("create an E2B sandbox: %d %v", resp.StatusCode, created)
	}
	return created
}

// startE2BReplicas starts two replicas over the PostgreSQL at dsn, each
// with an E2B listener of its own and no warm pools, and returns them and
// their E2B addresses.
func startE2BReplicas(t *testing.T, dsn string, extra ...string) ([]*server, []string) {
	t.Helper()
	e2bAddr := []string{fmt.Sprintf("127.0.0.1:%d", freePort(t)), fmt.Sprintf("127.0.0.1:%d", freePort(t))}
	rs := make([]*server, 2)
	for i := range rs {
		// One at a time: each with its own E2B listener.
		env := append([]string{"SANDBOX_RATE_LIMIT=0", "SANDBOX_POOL_SIZE=0", "SANDBOX_DATA_SCIENCE_POOL_SIZE=0",
			"SANDBOX_SESSION_POOL_SIZE=0", "SANDBOX_MACHINE_POOL_SIZE=0", "SANDBOX_E2B_LISTEN=" + e2bAddr[i],
			fmt.Sprintf("SANDBOX_REPLICA_NAME=replica-%d", i)}, extra...)
		rs[i] = startReplicas(t, dsn, 1, env...)[0]
	}
	return rs, e2bAddr
}
