package httpapi_test

import (
	"net/http"
	"strings"
	"testing"
)

// An environment the operator has not built is refused on REST runs and
// session creation with 404 environment_not_found, naming it; a run
// naming none runs on the host's root as before; a name no environment
// can have is a 400.
func TestEnvironmentOnREST(t *testing.T) {
	ts := startServer(t, twoKeys, noPools)
	p := wantProblem(t, ts.call(t, "POST", "/execute", aliceKey, map[string]any{"code": "1", "environment": "polars-env"}, nil),
		http.StatusNotFound, "environment_not_found")
	if !strings.Contains(p.Detail, `"polars-env"`) {
		t.Fatalf("detail %q does not name the environment", p.Detail)
	}
	wantProblem(t, ts.call(t, "POST", "/sessions", aliceKey, map[string]any{"environment": "polars-env"}, nil),
		http.StatusNotFound, "environment_not_found")
	wantProblem(t, ts.call(t, "POST", "/execute", aliceKey, map[string]any{"code": "1", "environment": "A/../b"}, nil),
		http.StatusBadRequest, "invalid_request")
	var res struct {
		Success bool   `json:"success"`
		Stdout  string `json:"stdout"`
	}
	if resp := ts.call(t, "POST", "/execute", aliceKey, map[string]any{"code": "print(6*7)", "environment": ""}, &res); resp.StatusCode != http.StatusOK || !res.Success || res.Stdout != "42\n" {
		t.Fatalf("run on the host's root: status %d, %+v", resp.StatusCode, res)
	}
}
