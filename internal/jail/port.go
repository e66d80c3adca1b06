package jail

import (
	"errors"
	"fmt"
)

// ErrPortClosed means nothing listens on the asked port on the sandbox's
// loopback.
var ErrPortClosed = errors.New("jail: nothing listens on that port in the sandbox")

// CheckPort refuses a port number that is not a TCP port.
func CheckPort(port int) error {
	if port < 1 || port > 65535 {
		return fmt.Errorf("jail: port %d is not a TCP port (1 to 65535)", port)
	}
	return nil
}
