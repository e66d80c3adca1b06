package gvisor

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
)

// forwardDir is the directory of the bundle bound at ForwardSocket's.
const forwardDir = "forward"

func (s *Sandbox) listenForward() error {
	dir := filepath.Join(s.dir, forwardDir)
	if err := os.Mkdir(dir, 0o755); err != nil {
		return fmt.Errorf("gvisor: forward: %w", err)
	}
	path := filepath.Join(dir, filepath.Base(ForwardSocket))
	l, err := net.Listen("unix", path)
	if err != nil {
		return fmt.Errorf("gvisor: forward: %w", err)
	}
	s.forward = l
	// Connecting takes write permission: the sandbox's uid alone has it.
	if err := os.Chown(path, s.uid, s.uid); err != nil {
		return fmt.Errorf("gvisor: forward: %w", err)
	}
	handle := s.spec.Forward.Handle
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return // closed at teardown
			}
			go handle(c)
		}
	}()
	return nil
}

func hostUDS(forward bool) string {
	if forward {
		return "open"
	}
	return "none"
}
