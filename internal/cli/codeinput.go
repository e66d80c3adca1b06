package cli

import (
	"flag"
	"fmt"
	"io"

	"github.com/codecage/codecage/internal/sandbox"
)

// codeInput is what run and validate share: the code (--code, a file, or
// stdin), --profile, --authorized-imports and the operator settings.
type codeInput struct {
	code     string
	profiles listFlag
	imports  listFlag
	config   *configFlags
}

func addCodeInput(fs *flag.FlagSet, verb string) *codeInput {
	in := &codeInput{}
	fs.StringVar(&in.code, "code", "", "Python code to "+verb)
	fs.StringVar(&in.code, "c", "", "shorthand for --code")
	fs.Var(&in.profiles, "profile", "profiles, comma-separated: basic, data_science, network, filesystem (enables them)")
	fs.Var(&in.imports, "authorized-imports", "modules the code may import, comma-separated; \"*\" switches the import policy off (the jail stays)")
	in.config = addConfigFlags(fs)
	return in
}

// start reads the code and starts a one-shot service (no warm pools): on
// the command line the user is the operator, so what they ask for is
// allowed. It returns a nil service and the exit status on failure.
func (in *codeInput) start(fs *flag.FlagSet, stdin io.Reader, stderr io.Writer, cmd string) (string, *sandbox.Service, int) {
	in.config.allow(in.profiles, in.imports)
	oneShot(in.config)
	cfg, ok := loadConfig(in.config, stderr, cmd)
	if !ok {
		return "", nil, exitUsage
	}
	// The code is read after the configuration, so that no more than its
	// limit is ever read.
	src, err := readSource(in.code, fs.Args(), stdin, cfg.MaxCodeSize)
	if err != nil {
		fmt.Fprintf(stderr, "codecage %s: %v\n", cmd, err)
		return "", nil, exitUsage
	}
	svc, status := startService(cfg, stderr, cmd)
	return src, svc, status
}
