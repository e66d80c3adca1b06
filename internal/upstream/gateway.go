package upstream

import (
	"errors"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
)

// An upstream with a gateway block is one a sandbox's creator may ask for
// through E2B's MCP gateway (`Sandbox.create({mcp: {github: {...}}})`): a
// copy of it is started for that sandbox alone, outside the sandbox, with
// the values the creator gave (a token, an API key) where the block says
// the server reads them. The sandbox never holds them.

// GatewayConfig maps each key of a creator's configuration of the server
// (E2B's names, e.g. githubPersonalAccessToken) to where the server reads
// its value.
type GatewayConfig struct {
	Secrets map[string]GatewaySecret `json:"secrets"`
}

// GatewaySecret is where one value goes: an environment variable of a
// command server, or a header of a url server (Prefix before the value:
// "Bearer ").
type GatewaySecret struct {
	Env    string `json:"env,omitempty"`
	Header string `json:"header,omitempty"`
	Prefix string `json:"prefix,omitempty"`
}

// Bounds of what a creator gives.
const (
	maxGatewayKey   = 64
	maxGatewayValue = 16 << 10
)

var (
	gatewayKeyRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_.-]*$`)
	envNameRE    = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
)

func (g *GatewayConfig) validate(s ServerConfig) error {
	if g == nil {
		return nil
	}
	for _, key := range slices.Sorted(maps.Keys(g.Secrets)) {
		v := g.Secrets[key]
		switch {
		case len(key) > maxGatewayKey || !gatewayKeyRE.MatchString(key):
			return fmt.Errorf("secret %q: a key is a name of letters, digits, '_', '-', '.' (at most %d)", key, maxGatewayKey)
		case (v.Env == "") == (v.Header == ""):
			return fmt.Errorf("secret %q: give exactly one of env (a command server's) or header (a url server's)", key)
		case v.Env != "" && s.URL != "":
			return fmt.Errorf("secret %q: env is for command servers; a url server takes a header", key)
		case v.Header != "" && s.Command != "":
			return fmt.Errorf("secret %q: header is for url servers; a command server takes env", key)
		case v.Env != "" && (!envNameRE.MatchString(v.Env) || v.Env == "PATH" || v.Env == "HOME"):
			return fmt.Errorf("secret %q: env %q is not a variable a secret may set", key, v.Env)
		case v.Header != "" && !validHeaderName(v.Header):
			return fmt.Errorf("secret %q: header %q is not a valid header name", key, v.Header)
		case strings.ContainsAny(v.Prefix, "\r\n\x00"):
			return fmt.Errorf("secret %q: prefix contains a line break or NUL", key)
		}
	}
	return nil
}

// ErrGatewayValue means a creator's configuration of a server is not
// one it takes: an unknown key, a value that is not a string, or one
// that is too long or holds a line break.
var ErrGatewayValue = errors.New("upstream: not a configuration this server takes")

// ForGateway is a copy of c for one sandbox, with the creator's values
// set where its gateway block says (an error names a key, never a value).
func (c ServerConfig) ForGateway(values map[string]any) (ServerConfig, error) {
	if c.Gateway == nil {
		return ServerConfig{}, fmt.Errorf("%w: the operator allows it no gateway", ErrGatewayValue)
	}
	out := c
	out.Env, out.Headers = maps.Clone(c.Env), maps.Clone(c.Headers)
	for _, key := range slices.Sorted(maps.Keys(values)) {
		where, ok := c.Gateway.Secrets[key]
		if !ok {
			return ServerConfig{}, fmt.Errorf("%w: %q is not one of its keys (%s)", ErrGatewayValue, key, strings.Join(slices.Sorted(maps.Keys(c.Gateway.Secrets)), ", "))
		}
		v, ok := values[key].(string)
		switch {
		case !ok:
			return ServerConfig{}, fmt.Errorf("%w: %q must be a string", ErrGatewayValue, key)
		case len(v) > maxGatewayValue:
			return ServerConfig{}, fmt.Errorf("%w: %q is longer than %d bytes", ErrGatewayValue, key, maxGatewayValue)
		case strings.ContainsAny(v, "\r\n\x00"):
			return ServerConfig{}, fmt.Errorf("%w: %q holds a line break or NUL", ErrGatewayValue, key)
		}
		if where.Env != "" {
			if out.Env == nil {
				out.Env = map[string]string{}
			}
			out.Env[where.Env] = v
			continue
		}
		if out.Headers == nil {
			out.Headers = map[string]string{}
		}
		out.Headers[where.Header] = where.Prefix + v
	}
	return out, nil
}

// SplitGateways parts c into code mode's servers and the gateway's (those
// with a gateway block, started per sandbox with its creator's values).
func (c Config) SplitGateways() (shared, gateways Config) {
	shared, gateways = Config{Servers: map[string]ServerConfig{}}, Config{Servers: map[string]ServerConfig{}}
	for name, sc := range c.Servers {
		if sc.Gateway != nil {
			gateways.Servers[name] = sc
		} else {
			shared.Servers[name] = sc
		}
	}
	return shared, gateways
}
