package upstream

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestParseConfig(t *testing.T) {
	cfg, err := ParseConfig([]byte(`{"servers": {
		"github": {"url": "https://api.example.com/mcp", "headers": {"Authorization": "Bearer x"}, "tools": ["search_issues"], "call_timeout": 2.5},
		"files": {"command": "npx", "args": ["-y", "some-server"], "env": {"TOKEN": "t"}},
		"_x9": {"url": "http://127.0.0.1:8080"}
	}}`))
	if err != nil {
		t.Fatal(err)
	}
	want := Config{Servers: map[string]ServerConfig{
		"github": {URL: "https://api.example.com/mcp", Headers: map[string]string{"Authorization": "Bearer x"}, Tools: []string{"search_issues"}, CallTimeout: Duration(2500 * time.Millisecond)},
		"files":  {Command: "npx", Args: []string{"-y", "some-server"}, Env: map[string]string{"TOKEN": "t"}},
		"_x9":    {URL: "http://127.0.0.1:8080"},
	}}
	if !reflect.DeepEqual(cfg, want) {
		t.Fatalf("got %+v\nwant %+v", cfg, want)
	}
	if got := cfg.Servers["github"].timeout(); got != 2500*time.Millisecond {
		t.Errorf("timeout = %v", got)
	}
	if got := cfg.Servers["files"].timeout(); got != DefaultCallTimeout {
		t.Errorf("default timeout = %v", got)
	}
	if cfg.Servers["files"].Transport() != "stdio" || cfg.Servers["github"].Transport() != "http" {
		t.Error("wrong transports")
	}
	// It round-trips, call_timeout in seconds.
	b, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"call_timeout":2.5`) {
		t.Errorf("marshalled: %s", b)
	}
	again, err := ParseConfig(b)
	if err != nil || !reflect.DeepEqual(again, want) {
		t.Errorf("round trip: %+v, %v", again, err)
	}

	if cfg, err := ParseConfig([]byte(`{"servers": {}}`)); err != nil || len(cfg.Servers) != 0 {
		t.Errorf("empty config: %+v, %v", cfg, err)
	}
}

func TestParseConfigErrors(t *testing.T) {
	long := strings.Repeat("a", 41)
	for _, tc := range []struct{ json, want string }{
		{`{"servers": {"Github": {"url": "https://x"}}}`, `server "Github": name must be a lower-case Python identifier`},
		{`{"servers": {"my-server": {"url": "https://x"}}}`, `server "my-server": name must be`},
		{`{"servers": {"9lives": {"url": "https://x"}}}`, `server "9lives": name must be`},
		{`{"servers": {"": {"url": "https://x"}}}`, `server "": name must be`},
		{`{"servers": {"` + long + `": {"url": "https://x"}}}`, `server "` + long + `": name is longer than 40 characters`},
		{`{"servers": {"import": {"url": "https://x"}}}`, `server "import": name is a Python keyword`},
		{`{"servers": {"s": {}}}`, `server "s": needs a command (stdio) or a url`},
		{`{"servers": {"s": {"command": "x", "url": "https://x"}}}`, `server "s": has both a command and a url`},
		{`{"servers": {"s": {"url": "ftp://x/y"}}}`, `server "s": url "ftp://x/y": scheme must be http or https`},
		{`{"servers": {"s": {"url": "/just/a/path"}}}`, `server "s": url "/just/a/path": scheme must be http or https`},
		{`{"servers": {"s": {"url": "http://"}}}`, `server "s": url "http://" has no host`},
		{`{"servers": {"s": {"url": "http://[::1"}}}`, `server "s": url:`},
		{`{"servers": {"s": {"url": "https://x", "env": {"A": "b"}}}}`, `server "s": args and env are for command servers`},
		{`{"servers": {"s": {"command": "x", "headers": {"A": "b"}}}}`, `server "s": headers are for url servers`},
		{`{"servers": {"s": {"url": "https://x", "headers": {"Bad Name": "b"}}}}`, `server "s": header "Bad Name": not a valid header name`},
		{`{"servers": {"s": {"url": "https://x", "headers": {"X": "a\nb"}}}}`, `server "s": header "X": value contains a line break`},
		{`{"servers": {"s": {"command": "x", "env": {"A=B": "c"}}}}`, `server "s": env name "A=B" is not valid`},
		{`{"servers": {"s": {"command": "x", "tools": [""]}}}`, `server "s": tools: empty tool name`},
		{`{"servers": {"s": {"command": "x", "call_timeout": -1}}}`, `server "s": duration: -1 seconds is out of range`},
		{`{"servers": {"s": {"command": "x", "call_timeout": "30s"}}}`, `server "s": duration: want a number of seconds, got "30s"`},
		{`{"servers": {"s": {"command": "x", "header": {}}}}`, `server "s": json: unknown field "header"`},
		{`{"mcpServers": {}}`, `unknown field "mcpServers"`},
		{`{"servers": {}} {}`, `trailing data`},
		{`not json`, `upstream config:`},
	} {
		_, err := ParseConfig([]byte(tc.json))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ParseConfig(%s) error = %v, want it to contain %q", tc.json, err, tc.want)
		}
	}
}

func TestLoadConfig(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.json")
	if err := os.WriteFile(good, []byte(`{"servers": {"s": {"command": "x"}}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := LoadConfig(good)
	if err != nil || cfg.Servers["s"].Command != "x" {
		t.Errorf("LoadConfig = %+v, %v", cfg, err)
	}
	bad := filepath.Join(dir, "bad.json")
	if err := os.WriteFile(bad, []byte(`{"servers": {"S": {"command": "x"}}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadConfig(bad); err == nil || !strings.Contains(err.Error(), bad+`: upstream config: server "S"`) {
		t.Errorf("LoadConfig(bad) error = %v", err)
	}
	if _, err := LoadConfig(filepath.Join(dir, "missing.json")); err == nil || !strings.Contains(err.Error(), "missing.json") {
		t.Errorf("LoadConfig(missing) error = %v", err)
	}
}
