package frontdoor

import (
	"log/slog"
	"net/http"
	"time"

	"github.com/codecage/codecage/internal/config"
)

// Settings are the limits every listener of the server shares (REST and
// MCP, E2B): how long a client may take to send a request, how long an
// idle connection is kept, how large its headers may be, and how many
// connections it may hold open.
type Settings struct {
	// ReadHeaderTimeout bounds the request line and headers.
	ReadHeaderTimeout time.Duration
	// ReadTimeout bounds the whole request, body included: a body
	// trickled a byte at a time is cut there.
	ReadTimeout time.Duration
	// WriteTimeout bounds an answer; streams (REST events, E2B process
	// streams and runCode) clear it and set their own per-write deadlines.
	WriteTimeout time.Duration
	// IdleTimeout closes a keep-alive connection that waits that long for
	// its next request.
	IdleTimeout time.Duration
	// MaxHeaderBytes bounds a request's headers.
	MaxHeaderBytes int
	// MaxConns and MaxConnsPerClient bound the connections open on one
	// listener, in all and per client address; those over are closed at
	// once.
	MaxConns, MaxConnsPerClient int
}

// Fixed parts of the door: generous for any real client, small enough
// that a slow or hostile one holds little.
const (
	readHeaderTimeout = 10 * time.Second
	maxHeaderBytes    = 64 << 10
)

// SettingsFrom reads the door's settings from the configuration
// (SANDBOX_READ_TIMEOUT, SANDBOX_WRITE_TIMEOUT, SANDBOX_IDLE_TIMEOUT,
// SANDBOX_MAX_CONNECTIONS, SANDBOX_MAX_CONNECTIONS_PER_CLIENT).
func SettingsFrom(cfg config.Config) Settings {
	return Settings{
		ReadHeaderTimeout: min(readHeaderTimeout, cfg.ReadTimeout),
		ReadTimeout:       cfg.ReadTimeout,
		WriteTimeout:      cfg.WriteTimeout,
		IdleTimeout:       cfg.IdleTimeout,
		MaxHeaderBytes:    maxHeaderBytes,
		MaxConns:          cfg.MaxConnections,
		MaxConnsPerClient: min(cfg.MaxConnectionsPerClient, cfg.MaxConnections),
	}
}

// NewServer is an http.Server for h with the door's timeouts and header
// limit; its errors go to log at warning level.
func NewServer(h http.Handler, s Settings, log *slog.Logger) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: s.ReadHeaderTimeout,
		ReadTimeout:       s.ReadTimeout,
		WriteTimeout:      s.WriteTimeout,
		IdleTimeout:       s.IdleTimeout,
		MaxHeaderBytes:    s.MaxHeaderBytes,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
}
