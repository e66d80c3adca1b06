package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"github.com/codecage/codecage/internal/envstore"
	"github.com/codecage/codecage/internal/service"
)

const envUsage = `usage:
  codecage env build NAME (--requirements FILE | --pip PKG... | --debian PKG... [--suite S] |
                           --image PATH | --dockerfile FILE [--context DIR]) [--base ENV]
                          [--preimport m,...] [--start-cmd CMD] [--ready-cmd CMD] [--workdir DIR] [--env K=V]...
  codecage env list [--json]
  codecage env show NAME
  codecage env rm NAME
  codecage env gc
Environments are kept in $SANDBOX_STATE_DIR/environments; this command
works on them directly, as their operator (the build's log goes to stderr).
`

// maxRequirementsFile bounds a requirements file read by env build.
const maxRequirementsFile = 1 << 20

// envCmd builds and manages environments: named read-only roots that runs
// and sessions start from.
func envCmd(args []string, stdout, stderr io.Writer) int {
	if code, ok := envSubcommand(args, stdout, stderr); !ok {
		return code
	}
	sub := args[0]
	fs := flag.NewFlagSet("env "+sub, flag.ContinueOnError)
	fs.SetOutput(stderr)
	var f envFlags
	f.register(fs)
	cf := addConfigFlags(fs)
	fs.Usage = func() {
		fmt.Fprint(stderr, envUsage+"\nFlags:\n")
		cf.printFlags(stderr)
	}
	name, code, ok := envName(fs, sub, args[1:], stderr)
	if !ok {
		return code
	}
	var b service.EnvironmentBuild
	if sub == "build" {
		var err error
		if b, err = envBuildFromFlags(name, &f); err != nil {
			fmt.Fprintln(stderr, "codecage env build:", err)
			return exitUsage
		}
		b.Log = stderr
	}
	oneShot(cf)
	svc, code := newService(cf, stderr, "env")
	if svc == nil {
		return code
	}
	defer svc.Close()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := runEnvSubcommand(ctx, svc, sub, name, b, f.asJSON, stdout, stderr); err != nil {
		fmt.Fprintf(stderr, "codecage env %s: %v\n", sub, err)
		if k := service.ErrorKind(err); k == service.KindInvalidRequest || k == service.KindEnvironmentNotFound || k == service.KindEnvironmentExists {
			return exitUsage
		}
		return exitFailure
	}
	return exitOK
}

// envSubcommand checks env's subcommand; when it returns false the command
// ends with the status it gives (help is not an error).
func envSubcommand(args []string, stdout, stderr io.Writer) (int, bool) {
	if len(args) == 0 {
		fmt.Fprint(stderr, envUsage)
		return exitUsage, false
	}
	switch args[0] {
	case "build", "list", "show", "rm", "gc":
		return 0, true
	case "help", "-h", "--help":
		fmt.Fprint(stdout, envUsage)
		return exitOK, false
	}
	fmt.Fprint(stderr, envUsage)
	return exitUsage, false
}

// envFlags holds env's own flags: the build's sources and settings, and
// list's --json.
type envFlags struct {
	requirements, suite, image, dockerfile, contextDir, base string
	startCmd, readyCmd, workdir                              string
	debs, preimport                                          listFlag
	pips, vars                                               multiFlag
	asJSON                                                   bool
}

func (f *envFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.requirements, "requirements", "", "build: a requirements file (one requirement a line, # comments)")
	fs.Var(&f.pips, "pip", "build: a Python requirement such as pandas>=2,<3 (repeated)")
	fs.Var(&f.debs, "debian", "build: Debian packages, comma-separated or repeated")
	fs.StringVar(&f.suite, "suite", "", "build: the Debian release (default: the host's)")
	fs.StringVar(&f.image, "image", "", "build: an image tarball or OCI layout directory, or a registry reference")
	fs.StringVar(&f.dockerfile, "dockerfile", "", "build: a Dockerfile")
	fs.StringVar(&f.contextDir, "context", "", "build: the Dockerfile's build context (default: its directory)")
	fs.StringVar(&f.base, "base", "", "build: the environment a requirements layer goes over (default: the host's root)")
	fs.Var(&f.preimport, "preimport", "build: modules the sandboxes import before any run, comma-separated")
	fs.StringVar(&f.startCmd, "start-cmd", "", "build: a command started in the background when a sandbox starts")
	fs.StringVar(&f.readyCmd, "ready-cmd", "", "build: a command that must succeed before a sandbox is handed out")
	fs.StringVar(&f.workdir, "workdir", "", "build: the sandboxes' working directory")
	fs.Var(&f.vars, "env", "build: a variable of the sandboxes, K=V (repeated)")
	fs.BoolVar(&f.asJSON, "json", false, "list: print the records as JSON")
}

// envName parses the flags and finds the environment's name, given before
// the flags or after them; only list and gc go without one.
func envName(fs *flag.FlagSet, sub string, rest []string, stderr io.Writer) (string, int, bool) {
	var name string
	if len(rest) > 0 && !strings.HasPrefix(rest[0], "-") {
		name, rest = rest[0], rest[1:]
	}
	if code, ok := parse(fs, rest); !ok {
		return "", code, false
	}
	if name == "" && fs.NArg() > 0 {
		name = fs.Arg(0)
	}
	if name == "" && sub != "list" && sub != "gc" {
		fmt.Fprint(stderr, envUsage)
		return "", exitUsage, false
	}
	return name, 0, true
}

// runEnvSubcommand does one subcommand on a started service and prints
// its answer.
func runEnvSubcommand(ctx context.Context, svc *service.Service, sub, name string, b service.EnvironmentBuild,
	asJSON bool, stdout, stderr io.Writer) error {
	switch sub {
	case "build":
		e, err := svc.BuildEnvironment(ctx, b)
		if err != nil {
			return err
		}
		printJSON(stdout, e)
	case "list":
		envs, err := svc.Environments(ctx)
		if err != nil {
			return err
		}
		printEnvironments(envs, asJSON, stdout, stderr)
	case "show":
		e, err := svc.Environment(ctx, name)
		if err != nil {
			return err
		}
		printJSON(stdout, e)
	case "rm":
		if err := svc.RemoveEnvironment(ctx, name); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "removed %s (codecage env gc frees its storage)\n", name)
	case "gc":
		r, err := svc.CollectEnvironments(ctx)
		if err != nil {
			return err
		}
		if len(r.Deferred) > 0 {
			fmt.Fprintf(stdout, "nothing collected: removed environments still in use by running sandboxes: %s\n", strings.Join(r.Deferred, ", "))
			return nil
		}
		fmt.Fprintf(stdout, "freed %d roots, %d layers, %d bytes\n", r.Roots, r.Layers, r.Bytes)
	}
	return nil
}

// printEnvironments prints env list's answer: JSON, or one line per
// environment (an empty store is said on stderr).
func printEnvironments(envs []envstore.Env, asJSON bool, stdout, stderr io.Writer) {
	if asJSON {
		printJSON(stdout, envs)
		return
	}
	if len(envs) == 0 {
		fmt.Fprintln(stderr, "no environments (codecage env build NAME ... builds one)")
	}
	for _, e := range envs {
		src := e.Source.Kind
		if e.Base != "" {
			src += " over " + e.Base
		}
		fmt.Fprintf(stdout, "%-24s %-26s %-8s %10d  %s\n", e.Name, src, e.PythonVersion, e.Size, e.Created.Format("2006-01-02 15:04"))
	}
}

// envBuildFromFlags reads the build's flags and files into a request;
// the service checks the rest.
func envBuildFromFlags(name string, f *envFlags) (service.EnvironmentBuild, error) {
	requirements, image, dockerfile, contextDir := f.requirements, f.image, f.dockerfile, f.contextDir
	b := service.EnvironmentBuild{Name: name, Requirements: f.pips, Debian: f.debs, Suite: f.suite, Image: image, Base: f.base,
		Preimport: f.preimport, StartCmd: f.startCmd, ReadyCmd: f.readyCmd, Workdir: f.workdir}
	if requirements != "" {
		data, err := readBounded(requirements, maxRequirementsFile)
		if err != nil {
			return b, err
		}
		lines := strings.Split(string(data), "\n")
		if !slices.ContainsFunc(lines, isRequirement) {
			return b, fmt.Errorf("--requirements %s lists no requirement (one a line; # starts a comment)", requirements)
		}
		b.Requirements = append(b.Requirements, lines...)
	}
	if dockerfile != "" {
		data, err := readBounded(dockerfile, 1<<20)
		if err != nil {
			return b, err
		}
		b.Dockerfile = string(data)
		if contextDir == "" {
			contextDir = filepath.Dir(dockerfile)
		}
	}
	if contextDir != "" {
		abs, err := filepath.Abs(contextDir)
		if err != nil {
			return b, err
		}
		b.ContextDir = abs
	}
	if image != "" && !strings.Contains(image, "://") {
		// A local tarball or layout: the service wants it absolute; a
		// reference (host/name:tag) is left as it is.
		if _, err := os.Stat(image); err == nil {
			if b.Image, err = filepath.Abs(image); err != nil {
				return b, err
			}
		}
	}
	for _, kv := range f.vars {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return b, fmt.Errorf("--env %q: want K=V", kv)
		}
		if b.Vars == nil {
			b.Vars = map[string]string{}
		}
		b.Vars[k] = v
	}
	return b, nil
}

// readBounded reads a file of at most max bytes.
func readBounded(path string, max int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, max+1))
	if err != nil {
		return nil, err
	}
	if int64(len(data)) > max {
		return nil, errors.New(path + ": larger than " + fmt.Sprint(max) + " bytes")
	}
	return data, nil
}

// multiFlag collects a flag's values as given, repeatable (a requirement's
// specifiers and a variable's value may hold commas).
type multiFlag []string

func (m *multiFlag) String() string { return strings.Join(*m, " ") }

func (m *multiFlag) Set(v string) error {
	*m = append(*m, v)
	return nil
}

// isRequirement: a requirements file's line that names something (not
// blank, not only a comment).
func isRequirement(line string) bool {
	line, _, _ = strings.Cut(line, "#")
	return strings.TrimSpace(line) != ""
}
