package mcpserver_test

import (
	"testing"
)

// execute_code and create_session take an environment; one the operator
// has not built is a tool error that says so and names it.
func TestEnvironmentOnMCP(t *testing.T) {
	cs := connect(t)
	toolRefused(t, cs, "execute_code", map[string]any{"code": "1", "environment": "polars-env"}, `environment not found: "polars-env"`)
	toolRefused(t, cs, "create_session", map[string]any{"environment": "polars-env"}, `environment not found: "polars-env"`)
	if out := toolOK(t, cs, "execute_code", map[string]any{"code": "print(6*7)", "environment": ""}); out["stdout"] != "42\n" {
		t.Fatalf("run on the host's root: %v", out)
	}
}
