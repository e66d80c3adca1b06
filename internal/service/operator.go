package service

import (
	"context"
	"fmt"
	"net"
	"slices"
)

// Who is an operator: the one who may build, remove and collect
// environments (and whatever else becomes the operator's).
//   - an in-process caller (no Caller: the CLI working on the state
//     directory, benchmarks) is the operator who runs it;
//   - on a server with API keys, a key named in SANDBOX_OPERATOR_KEYS;
//   - on a server without API keys (which listens on loopback only), a
//     caller from loopback, or over MCP's stdio: the same trust as every
//     other request there, which already runs code as anyone;
//   - everyone else is refused (ErrForbidden, 403).

// IsOperator reports whether the caller in ctx is an operator, and if
// not, why.
func (s *Service) IsOperator(ctx context.Context) error {
	return s.requireOperator(ctx)
}

func (s *Service) requireOperator(ctx context.Context) error {
	c, ok := CallerFrom(ctx)
	if !ok {
		return nil
	}
	if c.Key != "" {
		if slices.Contains(s.cfg.OperatorKeys, c.Key) {
			return nil
		}
		return fmt.Errorf("%w: environments are managed by operators, and API key %q is not one (SANDBOX_OPERATOR_KEYS names the operators' keys)", ErrForbidden, c.Key)
	}
	if c.Surface == SurfaceMCPStdio || c.Surface == SurfaceCLI {
		return nil
	}
	keyed := s.cfg.APIKeys != "" || s.cfg.APIKeysFile != ""
	if !keyed && loopback(c.RemoteAddr) {
		return nil
	}
	return fmt.Errorf("%w: environments are managed by operators: on a server without API keys only a caller on this host (loopback) is one; give the server SANDBOX_API_KEYS and name the operators' keys in SANDBOX_OPERATOR_KEYS", ErrForbidden)
}

// loopback reports whether a remote address ("host:port") is on loopback.
func loopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		host = addr
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
