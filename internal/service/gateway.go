package service

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/codecage/codecage/internal/service/gateway"
)

// E2B's MCP gateway, served from outside the sandbox (gateway/): the E2B
// surface opens it on create with the creator's `mcp`, gives it the SDK's
// token when the SDK "starts" it, and serves it on the sandbox's port
// 50005. Secrets stay in this process; nothing of them is logged.

// GatewayPort is the sandbox port E2B's SDKs reach the gateway on.
const GatewayPort = gateway.Port

// OffersGateway reports whether the operator allows any gateway server.
func (s *Service) OffersGateway() bool { return s.gateways.Offers() }

// CheckGateway refuses a creator's `mcp` before a sandbox is made for it:
// servers the operator does not allow (all named), values they do not take.
func (s *Service) CheckGateway(asked map[string]map[string]any) error {
	return s.gateways.Check(asked)
}

// OpenGateway starts session id's gateway for the servers asked, with
// their values; their names alone are reported.
func (s *Service) OpenGateway(ctx context.Context, id, owner string, asked map[string]map[string]any) error {
	if _, err := s.session(id, owner); err != nil {
		return err
	}
	start := time.Now()
	if err := s.gateways.Open(id, owner, asked); err != nil {
		return err
	}
	g := s.gateways.Get(id)
	s.emit(ctx, Event{Kind: EventSession, Action: "mcp_gateway", Outcome: "success", Duration: time.Since(start),
		Detail: id + ": " + strings.Join(g.Servers(), ",")})
	return nil
}

// ErrNoGateway means the sandbox was created without `mcp`.
var ErrNoGateway = fmt.Errorf("%w: the sandbox has no MCP gateway (create it with mcp)", ErrNotFound)

// gatewayOf is session id's gateway, for its owner.
func (s *Service) gatewayOf(ctx context.Context, id, owner string) (*gateway.Gateway, error) {
	g := s.gateways.Get(id)
	if g == nil || g.Owner() != owner {
		if _, err := s.GetSession(ctx, id, owner); err != nil {
			return nil, err
		}
		return nil, ErrNoGateway
	}
	return g, nil
}

// StartGateway is the SDK's start of the gateway (`mcp-gateway --config`,
// run as root): the gateway already runs, outside; it takes the token.
func (s *Service) StartGateway(ctx context.Context, id, owner, token string) error {
	g, err := s.gatewayOf(ctx, id, owner)
	if err != nil {
		return err
	}
	return g.SetToken(token)
}

// GatewayToken is the gateway's bearer token (E2B's getMcpToken), "" when
// the SDK has not started it yet.
func (s *Service) GatewayToken(ctx context.Context, id, owner string) (string, error) {
	g, err := s.gatewayOf(ctx, id, owner)
	if err != nil {
		return "", err
	}
	return g.Token(), nil
}

// sweepGateways ends, every interval, the gateways of sessions that are
// no longer live nor parked (closed, expired, lost), so that no server
// started for a sandbox outlives it.
func (s *Service) sweepGateways(interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			s.gateways.CloseAll()
			return
		case <-t.C:
		}
		for _, id := range s.gateways.IDs() {
			g := s.gateways.Get(id)
			if g == nil {
				continue
			}
			if _, err := s.session(id, g.Owner()); !errors.Is(err, ErrSessionNotFound) {
				continue // live (or another error: ask again later)
			}
			if _, parked, err := s.parked(context.Background(), g.Owner(), id); err == nil && !parked {
				s.gateways.Close(id)
			}
		}
	}
}

// GatewayEndpoint is session id's gateway endpoint for a request on its
// port, nil when it has none: its bearer token, which only the sandbox's
// creator was given, is what lets a caller in (the sandbox's traffic
// token is not asked: E2B's MCP clients send only the gateway's).
func (s *Service) GatewayEndpoint(id string) http.Handler {
	if g := s.gateways.Get(id); g != nil {
		return g
	}
	return nil
}
