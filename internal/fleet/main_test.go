package fleet

import (
	"os"
	"testing"

	"github.com/codecage/codecage/internal/jail"
)

// TestMain lets the test binary be re-executed as a sandbox's init: the
// state tests run the harness in real jails.
func TestMain(m *testing.M) {
	jail.MaybeRunInit()
	os.Exit(m.Run())
}
