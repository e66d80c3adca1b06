package upstream

import (
	"errors"
	"strings"
	"testing"
)

// A gateway block is checked where it is loaded, and a creator's values
// go where it says, each refusal naming the key and never the value.
func TestGatewayBlocks(t *testing.T) {
	for cfg, says := range map[string]string{
		`{"servers": {"gh": {"command": "x", "gateway": {"secrets": {"token": {"header": "Authorization"}}}}}}`: "header is for url servers",
		`{"servers": {"gh": {"url": "http://h/mcp", "gateway": {"secrets": {"token": {"env": "T"}}}}}}`:         "env is for command servers",
		`{"servers": {"gh": {"command": "x", "gateway": {"secrets": {"token": {}}}}}}`:                          "exactly one of env",
		`{"servers": {"gh": {"command": "x", "gateway": {"secrets": {"token": {"env": "PATH"}}}}}}`:             "not a variable a secret may set",
		`{"servers": {"gh": {"command": "x", "gateway": {"secrets": {"a b": {"env": "T"}}}}}}`:                  "a key is a name",
		`{"servers": {"gh": {"command": "x", "gateway": {"secretz": {}}}}}`:                                     "unknown field",
	} {
		if _, err := ParseConfig([]byte(cfg)); err == nil || !strings.Contains(err.Error(), says) {
			t.Errorf("%s: %v, want %q", cfg, err, says)
		}
	}
	cfg, err := ParseConfig([]byte(`{"servers": {
		"gh": {"command": "x", "env": {"LOG": "1"}, "gateway": {"secrets": {"token": {"env": "GH_TOKEN"}}}},
		"web": {"url": "https://h/mcp", "gateway": {"secrets": {"apiKey": {"header": "Authorization", "prefix": "Bearer "}}}},
		"plain": {"command": "y"}}}`))
	if err != nil {
		t.Fatal(err)
	}
	shared, gateways := cfg.SplitGateways()
	if len(shared.Servers) != 1 || len(gateways.Servers) != 2 {
		t.Fatalf("split: %v / %v", shared, gateways)
	}
	gh, err := cfg.Servers["gh"].ForGateway(map[string]any{"token": "s3cret"})
	if err != nil || gh.Env["GH_TOKEN"] != "s3cret" || gh.Env["LOG"] != "1" || cfg.Servers["gh"].Env["GH_TOKEN"] != "" {
		t.Errorf("gh for a gateway: %+v %v (the catalog's copy: %v)", gh.Env, err, cfg.Servers["gh"].Env)
	}
	web, err := cfg.Servers["web"].ForGateway(map[string]any{"apiKey": "k1"})
	if err != nil || web.Headers["Authorization"] != "Bearer k1" {
		t.Errorf("web for a gateway: %+v %v", web.Headers, err)
	}
	for says, values := range map[string]map[string]any{
		`not one of its keys`: {"other": "s3cret"},
		`must be a string`:    {"token": 5},
		`line break`:          {"token": "s3\ncret"},
		`longer than`:         {"token": strings.Repeat("s", maxGatewayValue+1)},
	} {
		_, err := cfg.Servers["gh"].ForGateway(values)
		if !errors.Is(err, ErrGatewayValue) || !strings.Contains(err.Error(), says) || strings.Contains(err.Error(), "s3cret") {
			t.Errorf("%v: %v, want %q and no value", values, err, says)
		}
	}
	if _, err := cfg.Servers["plain"].ForGateway(map[string]any{}); !errors.Is(err, ErrGatewayValue) {
		t.Errorf("a server without a gateway block: %v", err)
	}
}
