package server

import (
	"fmt"
	"log/slog"

	"github.com/codecage/codecage/internal/config"
	"github.com/codecage/codecage/internal/upstream"
)

// StartUpstream connects the upstream MCP servers of code mode, when the
// operator configured some (SANDBOX_TOOLS_CONFIG): nil without them; close
// is never nil.
func StartUpstream(cfg config.Config, log *slog.Logger) (m *upstream.Manager, close func(), err error) {
	if cfg.ToolsConfig == "" {
		return nil, func() {}, nil
	}
	uc, err := upstream.LoadConfig(cfg.ToolsConfig)
	if err != nil {
		return nil, nil, fmt.Errorf("SANDBOX_TOOLS_CONFIG: %w", err)
	}
	m = upstream.NewManager(uc, log)
	log.Info("code mode: upstream MCP servers", "servers", len(uc.Servers), "config", cfg.ToolsConfig)
	return m, func() { _ = m.Close() }, nil
}
