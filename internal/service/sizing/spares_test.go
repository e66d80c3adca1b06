package sizing

import (
	"testing"

	"github.com/codecage/codecage/internal/config"
)

// Machine spares are native, kept only where machines are on, in E2B's
// shape when the E2B surface listens; session spares follow the backends.
func TestSparesFollowTheConfiguration(t *testing.T) {
	c := config.DefaultConfig()
	c.SessionPoolSize, c.MachinePoolSize = 2, 3
	if want := Spares(c); want[config.IsolationNative] != 2 {
		t.Fatalf("native spares: %v", want)
	}
	if n, home, servers := MachineSpares(c); n != 3 || home != "" || servers {
		t.Fatalf("without E2B: %d %q %v", n, home, servers)
	}
	c.E2BListen = "127.0.0.1:0"
	if n, home, servers := MachineSpares(c); n != 3 || home != E2BHome || !servers {
		t.Fatalf("with E2B: %d %q %v", n, home, servers)
	}
	c.MachineSessions = false
	if n, _, _ := MachineSpares(c); n != 0 {
		t.Fatalf("machines off: %d spares", n)
	}
	c.MachineSessions, c.Isolation = true, config.IsolationGVisor
	if n, _, _ := MachineSpares(c); n != 0 {
		t.Fatalf("gVisor: %d machine spares", n)
	}
	if want := Spares(c); want[config.IsolationNative] != 0 {
		t.Fatalf("gVisor only: native spares %v", want)
	}
}
