package jail

import (
	"os"
	"strconv"
	"strings"
)

// CapSysAdmin is CAP_SYS_ADMIN's bit in a capability set.
const CapSysAdmin = 21

// HasCapability reports whether this process holds capability bit cap in
// its effective set (/proc/self/status), and true when that cannot be
// read: callers only narrow what they do when it says no.
func HasCapability(cap uint) bool {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return true
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "CapEff:"); ok {
			n, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			return err != nil || n&(1<<cap) != 0
		}
	}
	return true
}
