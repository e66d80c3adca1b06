package jail

import "os"

// helpers are other jobs this binary does inside a sandbox, by the first
// argument that names each: a backend that runs some of its own code
// beside the program (gVisor's terminal relay) registers it here, and
// [MaybeRunInit] runs it, so every binary that starts sandboxes can.
var helpers = map[string]func() int{}

// RegisterHelper makes arg, as this binary's first argument, run run and
// exit with its status. Call it from an init function.
func RegisterHelper(arg string, run func() int) { helpers[arg] = run }

// runHelper runs the helper os.Args names, if any, and exits.
func runHelper() {
	if len(os.Args) < 2 {
		return
	}
	if run := helpers[os.Args[1]]; run != nil {
		os.Exit(run())
	}
}
