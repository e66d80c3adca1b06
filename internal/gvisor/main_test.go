package gvisor_test

import (
	"os"
	"testing"

	"github.com/codecage/codecage/internal/jail"
)

// TestMain lets the test binary be the terminal relay inside a sandbox.
func TestMain(m *testing.M) {
	jail.MaybeRunInit()
	if os.Getenv(podEnv) != "" {
		os.Exit(podContainer())
	}
	os.Exit(m.Run())
}
