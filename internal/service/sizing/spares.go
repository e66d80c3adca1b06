package sizing

import "github.com/codecage/codecage/internal/config"

// E2BHome is the home of E2B's sandboxes, /home/user as on E2B.
const E2BHome = "/home/user"

// Spares is how many spare sessions to keep started per backend in use.
func Spares(c config.Config) map[string]int {
	want := map[string]int{}
	if c.Isolation != config.IsolationGVisor {
		want[config.IsolationNative] = c.SessionPoolSize
	}
	if c.GVisorInUse() {
		want[config.IsolationGVisor] = c.GVisorSessionPoolSize
	}
	return want
}

// MachineSpares is how many native machine spares to keep (0 where
// machines are off or not native), and their home and servers setting:
// as the E2B surface creates its sandboxes when it listens, else as a
// machine: true session of the default home.
func MachineSpares(c config.Config) (n int, home string, servers bool) {
	if !c.MachineSessions || c.Isolation == config.IsolationGVisor {
		return 0, "", false
	}
	if c.E2BListen != "" {
		return c.MachinePoolSize, E2BHome, true
	}
	return c.MachinePoolSize, "", false
}
