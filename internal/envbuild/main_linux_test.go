package envbuild

import (
	"os"
	"testing"

	"github.com/codecage/codecage/internal/jail"
)

func TestMain(m *testing.M) {
	jail.MaybeRunInit() // runs the confinement helper when re-executed as it
	os.Exit(m.Run())
}
