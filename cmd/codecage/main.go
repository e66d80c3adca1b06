// Command codecage runs untrusted Python behind a kernel boundary.
package main

import (
	"os"

	"github.com/codecage/codecage/internal/cli"
	"github.com/codecage/codecage/internal/jail"
)

func main() {
	// A re-executed codecage may be a sandbox's init: that never returns.
	jail.MaybeRunInit()
	os.Exit(cli.Main(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}
