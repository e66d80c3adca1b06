package api

// Owner is who owns the sessions a caller creates and sees: the one rule
// of every surface. With API keys it is the key ("key:<name>"), so a key
// sees the same sessions over REST, MCP and E2B (an E2B sandbox is a
// session). Without a key it is fallback, what the surface tells its
// clients apart by: "" (everyone local) for REST and E2B, an MCP
// connection's own id for MCP.
func Owner(key, fallback string) string {
	if key != "" {
		return "key:" + key
	}
	return fallback
}
