package service_test

import (
	"os"
	"testing"

	"github.com/codecage/codecage/internal/jail"
)

func TestMain(m *testing.M) {
	jail.MaybeRunInit() // the test binary is re-executed as the sandbox init
	if os.Getenv(rootlessProbeEnv) == "1" {
		os.Exit(rootlessProbe(os.Stdout))
	}
	code := m.Run()
	removeTestEnvironment()
	os.Exit(code)
}
