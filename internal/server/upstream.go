package server

import (
	"fmt"
	"log/slog"

	"github.com/codecage/codecage/internal/config"
	"github.com/codecage/codecage/internal/upstream"
)

// StartUpstream connects the upstream MCP servers of code mode, when the
// operator configured some (SANDBOX_TOOLS_CONFIG): nil without them; close
// is never nil. The servers with a gateway block are not code mode's: a
// sandbox's MCP gateway starts each for its sandbox alone, with its
// creator's values (gateways).
func StartUpstream(cfg config.Config, log *slog.Logger) (m *upstream.Manager, gateways upstream.Config, close func(), err error) {
	if cfg.ToolsConfig == "" {
		return nil, upstream.Config{}, func() {}, nil
	}
	uc, err := upstream.LoadConfig(cfg.ToolsConfig)
	if err != nil {
		return nil, upstream.Config{}, nil, fmt.Errorf("SANDBOX_TOOLS_CONFIG: %w", err)
	}
	shared, gateways := uc.SplitGateways()
	log.Info("code mode: upstream MCP servers", "servers", len(shared.Servers), "gateway_servers", len(gateways.Servers), "config", cfg.ToolsConfig)
	if len(shared.Servers) == 0 {
		return nil, gateways, func() {}, nil
	}
	m = upstream.NewManager(shared, log)
	return m, gateways, func() { _ = m.Close() }, nil
}
