// Package upstream is the supervisor's side of code mode: it holds the
// connections to other MCP servers ("upstreams"), whose tools sandboxed
// Python calls through a `tools` object. The connections and their
// credentials stay in this process; the sandbox only ever sees tool names,
// schemas and results.
package upstream

import (
	"github.com/codecage/codecage/internal/egress"

	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/url"
	"os"
	"regexp"
	"slices"
	"strings"
	"time"
)

// DefaultCallTimeout bounds a tool call whose server sets no call_timeout.
const DefaultCallTimeout = 30 * time.Second

// Config is the set of upstream servers, keyed by the name Python code uses
// for them (tools.<name>.<tool>(...)).
type Config struct {
	Servers map[string]ServerConfig `json:"servers"`
}

// ServerConfig is one upstream: a stdio command or a streamable HTTP URL.
type ServerConfig struct {
	// Command runs a stdio server; it is looked up in the child's PATH
	// (/usr/local/bin:/usr/bin:/bin unless Env sets another).
	Command string   `json:"command,omitempty"`
	Args    []string `json:"args,omitempty"`
	// Env is the child's whole environment besides PATH and HOME (which it
	// may override): nothing else of ours is inherited, so the supervisor's
	// own secrets never reach an upstream. The upstream's secrets live here.
	Env map[string]string `json:"env,omitempty"`

	// URL is a streamable HTTP endpoint (http or https).
	URL string `json:"url,omitempty"`
	// Headers are added to every request to URL's host, e.g. Authorization.
	Headers map[string]string `json:"headers,omitempty"`

	// Tools, if set, limits which of the server's tools are exposed.
	Tools []string `json:"tools,omitempty"`
	// CallTimeout bounds one tool call, reconnecting included; zero means
	// DefaultCallTimeout. In JSON it is a number of seconds.
	CallTimeout Duration `json:"call_timeout,omitempty"`

	// Gateway, when set, lets a sandbox's creator ask for this server
	// through E2B's MCP gateway (gateway.go).
	Gateway *GatewayConfig `json:"gateway,omitempty"`

	// Sandbox, when set, runs the stdio server in a sandbox of its own
	// (a machine session of the server's) instead of as a process of the
	// supervisor's: a catalog server the operator allows but does not
	// vouch for, with its own secrets and the egress it names alone.
	Sandbox *SandboxConfig `json:"sandbox,omitempty"`
}

// SandboxConfig is the sandbox a stdio server runs in.
type SandboxConfig struct {
	// NetworkAllow are the destinations it may reach (names, *.suffix
	// wildcards, addresses, CIDR blocks), within the operator's
	// SANDBOX_NETWORK_ALLOW; none: no network at all.
	NetworkAllow []string `json:"network_allow,omitempty"`
	// Environment is the operator's environment it starts from (one
	// built from the server's image or package); "": the host's root.
	Environment string `json:"environment,omitempty"`
}

// Duration is a time.Duration written in JSON as a number of seconds
// (fractions allowed), the unit people write configuration in.
type Duration time.Duration

// UnmarshalJSON reads a number of seconds.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s float64
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("duration: want a number of seconds, got %s", b)
	}
	if s < 0 || math.IsInf(s, 0) || s > float64(math.MaxInt64)/float64(time.Second) {
		return fmt.Errorf("duration: %v seconds is out of range", s)
	}
	*d = Duration(s * float64(time.Second))
	return nil
}

// MarshalJSON writes a number of seconds.
func (d Duration) MarshalJSON() ([]byte, error) {
	return json.Marshal(time.Duration(d).Seconds())
}

// Transport is "stdio" for a command and "http" for a URL.
func (c ServerConfig) Transport() string {
	if c.URL != "" {
		return "http"
	}
	return "stdio"
}

// timeout is the effective per-call timeout.
func (c ServerConfig) timeout() time.Duration {
	if c.CallTimeout > 0 {
		return time.Duration(c.CallTimeout)
	}
	return DefaultCallTimeout
}

// exposes reports whether the Tools filter lets tool through.
func (c ServerConfig) exposes(tool string) bool {
	return len(c.Tools) == 0 || slices.Contains(c.Tools, tool)
}

// LoadConfig reads and validates a JSON configuration file.
func LoadConfig(path string) (Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return Config{}, fmt.Errorf("upstream config: %w", err)
	}
	cfg, err := ParseConfig(data)
	if err != nil {
		return Config{}, fmt.Errorf("%s: %w", path, err)
	}
	return cfg, nil
}

// ParseConfig decodes and validates a JSON configuration. Unknown fields are
// errors: a misspelt "headers" would otherwise drop a credential silently.
func ParseConfig(data []byte) (Config, error) {
	var raw struct {
		Servers map[string]json.RawMessage `json:"servers"`
	}
	if err := strictDecode(data, &raw); err != nil {
		return Config{}, fmt.Errorf("upstream config: %w", err)
	}
	cfg := Config{Servers: make(map[string]ServerConfig, len(raw.Servers))}
	// Each server on its own, so that an error can name it.
	for name, r := range raw.Servers {
		var sc ServerConfig
		if err := strictDecode(r, &sc); err != nil {
			return Config{}, fmt.Errorf("upstream config: server %q: %w", name, err)
		}
		cfg.Servers[name] = sc
	}
	if err := cfg.Validate(); err != nil {
		return Config{}, err
	}
	return cfg, nil
}

func strictDecode(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if dec.More() {
		return errors.New("trailing data after the JSON value")
	}
	return nil
}

var serverNameRE = regexp.MustCompile(`^[a-z_][a-z0-9_]*$`)

// maxServerName keeps tools.<server> short enough to read in a stub.
const maxServerName = 40

// Validate checks every server and names the first one that is wrong.
func (c Config) Validate() error {
	names := make([]string, 0, len(c.Servers))
	for name := range c.Servers {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		if err := validateServer(name, c.Servers[name]); err != nil {
			return fmt.Errorf("upstream config: server %q: %w", name, err)
		}
	}
	return nil
}

func validateServer(name string, s ServerConfig) error {
	if err := s.Gateway.validate(s); err != nil {
		return fmt.Errorf("gateway: %w", err)
	}
	switch {
	case len(name) > maxServerName:
		return fmt.Errorf("name is longer than %d characters", maxServerName)
	case !serverNameRE.MatchString(name):
		return errors.New("name must be a lower-case Python identifier ([a-z_][a-z0-9_]*)")
	case pythonKeywords[name]:
		return errors.New("name is a Python keyword")
	}
	switch {
	case s.Command == "" && s.URL == "":
		return errors.New("needs a command (stdio) or a url (streamable HTTP)")
	case s.Command != "" && s.URL != "":
		return errors.New("has both a command and a url; give exactly one")
	}
	if s.URL != "" {
		u, err := url.Parse(s.URL)
		if err != nil {
			return fmt.Errorf("url: %w", err)
		}
		if u.Scheme != "http" && u.Scheme != "https" {
			return fmt.Errorf("url %q: scheme must be http or https", s.URL)
		}
		if u.Host == "" {
			return fmt.Errorf("url %q has no host", s.URL)
		}
		if len(s.Args) > 0 || len(s.Env) > 0 {
			return errors.New("args and env are for command servers, not url ones")
		}
		for k, v := range s.Headers {
			if !validHeaderName(k) {
				return fmt.Errorf("header %q: not a valid header name", k)
			}
			if strings.ContainsAny(v, "\r\n\x00") {
				return fmt.Errorf("header %q: value contains a line break or NUL", k)
			}
		}
	} else {
		if len(s.Headers) > 0 {
			return errors.New("headers are for url servers; give a command server its secrets in env")
		}
		if strings.ContainsRune(s.Command, 0) {
			return errors.New("command contains NUL")
		}
		for k, v := range s.Env {
			if k == "" || strings.ContainsAny(k, "=\x00") {
				return fmt.Errorf("env name %q is not valid", k)
			}
			if strings.ContainsRune(v, 0) {
				return fmt.Errorf("env %s: value contains NUL", k)
			}
		}
	}
	if s.Sandbox != nil {
		if s.Command == "" {
			return errors.New("sandbox: only a command (stdio) server runs in a sandbox")
		}
		if s.Gateway == nil {
			return errors.New("sandbox: a server in a sandbox of its own is a gateway server (give it a gateway block)")
		}
		if err := (egress.NetworkRules{AllowOut: s.Sandbox.NetworkAllow}).Check(); err != nil {
			return fmt.Errorf("sandbox: network_allow: %w", err)
		}
	}
	for _, t := range s.Tools {
		if t == "" {
			return errors.New("tools: empty tool name")
		}
	}
	if s.CallTimeout < 0 {
		return errors.New("call_timeout must not be negative")
	}
	return nil
}

// validHeaderName is RFC 7230's token.
func validHeaderName(s string) bool {
	if s == "" {
		return false
	}
	for _, r := range s {
		if r >= 0x80 || r <= ' ' || strings.ContainsRune(`"(),/:;<=>?@[\]{}`, r) || r == 0x7f {
			return false
		}
	}
	return true
}
