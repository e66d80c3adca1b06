package cli

import (
	"io"
	"log/slog"

	"github.com/codecage/codecage/internal/config"
)

// newLogger builds the server's logger: text or JSON on w, at the level
// the configuration names.
func newLogger(cfg config.Config, w io.Writer) *slog.Logger {
	var level slog.Level
	_ = level.UnmarshalText([]byte(cfg.LogLevel))
	opts := &slog.HandlerOptions{Level: level}
	if cfg.LogFormat == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}
