package cli

import (
	"os"
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

// codecage env on a store with nothing in it: list says so on stderr
// (stdout stays empty for scripts), a requirements file that lists
// nothing is refused as such (not as "no source"), and a name that is
// not there is named.
func TestEnvCommandsOnAnEmptyStore(t *testing.T) {
	t.Setenv("SANDBOX_STATE_DIR", t.TempDir())
	code, out, errOut := cli(t, "", "env", "list")
	if code != exitOK || out != "" || !strings.Contains(errOut, "no environments") {
		t.Fatalf("env list: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	reqs := t.TempDir() + "/requirements.txt"
	if err := os.WriteFile(reqs, []byte("# nothing yet\n\n   \n"), 0o644); err != nil {
		t.Fatal(err)
	}
	code, _, errOut = cli(t, "", "env", "build", "e1", "--requirements", reqs)
	if code != exitUsage || !strings.Contains(errOut, "lists no requirement") {
		t.Fatalf("env build with an empty requirements file: exit %d, stderr %q", code, errOut)
	}
	code, _, errOut = cli(t, "", "env", "show", "nope")
	if code != exitUsage || !strings.Contains(errOut, `"nope"`) {
		t.Fatalf("env show nope: exit %d, stderr %q", code, errOut)
	}
}
