package commands

import (
	"fmt"

	"github.com/codecage/codecage/internal/service/errdefs"
)

// The kernel's bounds on what execve takes. MaxArgLen is MAX_ARG_STRLEN
// (32 pages, with the string's NUL); MaxArgTotal bounds a command's
// arguments and environment together (each string with its NUL and its
// pointer): half of the kernel's limit under the usual 8 MiB stack (a
// quarter of the stack), so the wrapping shell's arguments fit beside.
// Over either, execve fails with E2BIG: the caller's error, named before
// anything starts, not a server failure clients would retry.
const (
	MaxArgLen   = 32*4096 - 1
	MaxArgTotal = 1 << 20
)

// checkArgList refuses an argument list or environment execve would
// refuse.
func checkArgList(command string, argv, env []string) error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: argument list too long: "+format, append([]any{errdefs.ErrInvalidRequest}, args...)...)
	}
	if len(command) > MaxArgLen {
		return bad("the command is %d bytes; the kernel takes at most %d bytes in one argument (a longer script goes in a file)", len(command), MaxArgLen)
	}
	total := len(command) + 1 + 8
	for i, a := range argv {
		if len(a) > MaxArgLen {
			return bad("argv[%d] is %d bytes; the kernel takes at most %d bytes in one argument (pass more data in a file)", i, len(a), MaxArgLen)
		}
		total += len(a) + 1 + 8
	}
	for _, e := range env {
		if len(e) > MaxArgLen {
			return bad("an environment variable is %d bytes; the kernel takes at most %d", len(e), MaxArgLen)
		}
		total += len(e) + 1 + 8
	}
	if total > MaxArgTotal {
		return bad("the arguments and environment take %d bytes; the limit is %d (pass more data in a file)", total, MaxArgTotal)
	}
	return nil
}
