package cli

import (
	"encoding/json"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"testing"
)

// freeAddr is a loopback address with a port nobody listens on now.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// The listen addresses are settings like any other: a --config file sets
// both, with no --listen flag and no SANDBOX_LISTEN, and serve answers
// there (REST's /health; E2B's API answers at all).
func TestServeListenFromConfigFile(t *testing.T) {
	dir := t.TempDir()
	rest, e2b := freeAddr(t), freeAddr(t)
	b, _ := json.Marshal(map[string]any{"listen": rest, "e2b_listen": e2b, "pool_size": 0, "session_pool_size": 0,
		"state_dir": filepath.Join(dir, "state"), "audit_db": filepath.Join(dir, "audit.db")})
	file := filepath.Join(dir, "codecage.json")
	if err := os.WriteFile(file, b, 0o600); err != nil {
		t.Fatal(err)
	}
	s := startServeArgs(t, []string{"serve", "--config", file}, "SANDBOX_LISTEN=", "SANDBOX_E2B_LISTEN=")
	if s.url != "http://"+rest || s.e2bURL != "http://"+e2b {
		t.Fatalf("serve listens on %q and %q, want %s and %s from %s", s.url, s.e2bURL, rest, e2b, file)
	}
	resp, err := http.Get(s.url + "/health")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("GET /health: %d", resp.StatusCode)
	}
	if resp, err = http.Get(s.e2bURL + "/v2/sandboxes"); err != nil {
		t.Fatalf("the E2B listener of the config file does not answer: %v", err)
	}
	resp.Body.Close()
}
