// Package reexec lets packages give this binary other jobs, chosen by its
// first argument when it re-executes itself: a backend's helper beside a
// sandboxed program (gVisor's terminal relay), a build tool's confinement.
// It is a leaf any layer may use, so a package that needs a helper of its
// own does not have to import a backend for it.
package reexec

import "os"

// helpers maps a first argument to the job it names.
var helpers = map[string]func() int{}

// Register makes arg, as this binary's first argument, run run and exit
// with its status. Call it from an init function; a second registration
// of the same arg is a programming error.
func Register(arg string, run func() int) {
	if _, dup := helpers[arg]; dup {
		panic("reexec: " + arg + " registered twice")
	}
	helpers[arg] = run
}

// Run runs the helper os.Args names, if any, and exits with its status;
// otherwise it returns. Call it first thing in main and in TestMain of a
// test binary that starts helpers (the jail's MaybeRunInit calls it).
func Run() {
	if len(os.Args) < 2 {
		return
	}
	if run := helpers[os.Args[1]]; run != nil {
		os.Exit(run())
	}
}
