package cli

import (
	"strings"
	"testing"
)

// codecage run --environment and sessions create --environment: an
// environment the operator has not built is refused, named, and the
// exit status says it was the caller's choice (run: usage; a server's
// refusal: refused).
func TestEnvironmentFlags(t *testing.T) {
	code, out, errOut := cli(t, "", "run", "--environment", "polars-env", "-c", "print(1)")
	if code != exitUsage || out != "" || !strings.Contains(errOut, `environment not found: "polars-env"`) {
		t.Fatalf("run --environment polars-env: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	sessionsServer(t)
	code, _, errOut = cli(t, "", "sessions", "create", "--environment", "polars-env")
	if code != exitRefused || !strings.Contains(errOut, `"polars-env"`) {
		t.Fatalf("sessions create --environment polars-env: exit %d, stderr %q", code, errOut)
	}
}
