package cli

import (
	"flag"
	"fmt"
	"io"
	"log/slog"

	root "github.com/codecage/codecage/internal/server" // the composition root; "server" names a test type here
	"github.com/codecage/codecage/internal/service"
)

// codeInput is what run and validate share: the code (--code, a file, or
// stdin), --profile, --authorized-imports and the operator settings.
type codeInput struct {
	code     string
	profiles listFlag
	imports  listFlag
	config   *configFlags
	// tools connects code mode's upstream servers (run, not validate);
	// they log warnings to stderr, as stdout is the code's.
	tools bool
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
// allowed. It returns a nil service and the exit status on failure; stop
// closes the service and what it uses.
func (in *codeInput) start(fs *flag.FlagSet, stdin io.Reader, stderr io.Writer, cmd string) (src string, svc *service.Service, stop func(), status int) {
	in.config.allow(in.profiles, in.imports)
	oneShot(in.config)
	cfg, ok := loadConfig(in.config, stderr, cmd)
	if !ok {
		return "", nil, nil, exitUsage
	}
	// The code is read after the configuration, so that no more than its
	// limit is ever read.
	src, err := readSource(in.code, fs.Args(), stdin, cfg.MaxCodeSize)
	if err != nil {
		fmt.Fprintf(stderr, "codecage %s: %v\n", cmd, err)
		return "", nil, nil, exitUsage
	}
	opts := &service.Options{}
	stopUpstream := func() {}
	if in.tools {
		log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
		if opts.Upstream, opts.Gateways, stopUpstream, err = root.StartUpstream(cfg, log); err != nil {
			fmt.Fprintf(stderr, "codecage %s: %v\n", cmd, err)
			return "", nil, nil, exitUsage
		}
	}
	if svc, status = startService(cfg, opts, stderr, cmd); svc == nil {
		stopUpstream()
		return "", nil, nil, status
	}
	return src, svc, func() { svc.Close(); stopUpstream() }, status
}
