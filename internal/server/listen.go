package server

import (
	"fmt"
	"log/slog"
	"net"

	"github.com/codecage/codecage/internal/access"
	"github.com/codecage/codecage/internal/config"
	"github.com/codecage/codecage/internal/frontdoor"
)

// doorSettings are the listeners' timeouts and connection caps, the caps
// lowered to fit half the open-file limit (raised to its hard limit first)
// so that a flood of connections leaves the sandboxes their descriptors.
func doorSettings(cfg config.Config, withE2B bool, log *slog.Logger) frontdoor.Settings {
	listeners := 1
	if withE2B {
		listeners = 2
	}
	fds := frontdoor.RaiseFileLimit()
	door := frontdoor.WithinFileLimit(frontdoor.SettingsFrom(cfg), listeners, fds)
	if door.MaxConns < cfg.MaxConnections {
		log.Warn("the open-file limit lowers SANDBOX_MAX_CONNECTIONS (half of it is kept for sandboxes); raise the limit (ulimit -n, LimitNOFILE=) to allow more",
			"open_file_limit", fds, "max_connections", door.MaxConns, "asked", cfg.MaxConnections)
	}
	return door
}

// loadKeys reads SANDBOX_API_KEYS and SANDBOX_API_KEYS_FILE.
func loadKeys(cfg config.Config) (*access.Keys, error) {
	keys, err := access.ParseKeys(cfg.APIKeys)
	if err != nil {
		return nil, fmt.Errorf("SANDBOX_API_KEYS: %w", err)
	}
	if cfg.APIKeysFile != "" {
		more, err := access.LoadKeysFile(cfg.APIKeysFile)
		if err != nil {
			return nil, fmt.Errorf("SANDBOX_API_KEYS_FILE: %w", err)
		}
		if err := keys.Merge(more); err != nil {
			return nil, fmt.Errorf("SANDBOX_API_KEYS_FILE: %w", err)
		}
	}
	return keys, nil
}

// bindAddress returns where to listen: as asked, or, without API keys, the
// loopback address with the same port.
func bindAddress(listen string, haveKeys bool) (string, error) {
	host, port, err := net.SplitHostPort(listen)
	if err != nil {
		return "", fmt.Errorf("--listen %q: %v (want host:port, e.g. 127.0.0.1:8001)", listen, err)
	}
	if haveKeys || host == "localhost" {
		return listen, nil
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
		return listen, nil
	}
	return net.JoinHostPort("127.0.0.1", port), nil
}

// rateText says how callers are rate limited, for the startup line.
func rateText(cfg config.Config, keys int) string {
	switch {
	case cfg.RateLimit == 0 && keys == 0:
		return "none (no API keys: one caller; bursts wait in the queue)"
	case cfg.RateLimit == 0:
		return "none"
	}
	return fmt.Sprintf("%g/s per key, burst %d", cfg.RateLimit, cfg.RateBurst)
}
