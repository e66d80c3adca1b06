package cli

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
)

// packagesCmd manages the operator's package layer: packages every
// sandbox can import, installed with the same checks and jail as
// pip_install, read-only inside.
func packagesCmd(args []string, stdout, stderr io.Writer) int {
	usage := "usage: codecage packages install NAME [--version V] [--json] | codecage packages list [--json]"
	if len(args) == 0 || (args[0] != "install" && args[0] != "list") {
		fmt.Fprintln(stderr, usage)
		return exitUsage
	}
	sub := args[0]
	fs := flag.NewFlagSet("packages "+sub, flag.ContinueOnError)
	fs.SetOutput(stderr)
	version := fs.String("version", "", "version or specifier (default: latest)")
	asJSON := fs.Bool("json", false, "print the result object")
	cf := addConfigFlags(fs)
	fs.Usage = func() {
		fmt.Fprintln(stderr, usage+"\n\nFlags:")
		cf.printFlags(stderr)
	}
	// The package name may come before the flags.
	rest := args[1:]
	var name string
	if len(rest) > 0 && !strings.HasPrefix(rest[0], "-") {
		name, rest = rest[0], rest[1:]
	}
	if code, ok := parse(fs, rest); !ok {
		return code
	}
	if name == "" && fs.NArg() > 0 {
		name = fs.Arg(0)
	}
	oneShot(cf)
	svc, code := newService(cf, stderr, "packages")
	if svc == nil {
		return code
	}
	defer svc.Close()
	if sub == "list" {
		pkgs := svc.LayerPackages()
		if *asJSON {
			printJSON(stdout, pkgs)
			return exitOK
		}
		fmt.Fprintf(stdout, "%s:\n", svc.PackagesDir())
		for _, p := range pkgs {
			fmt.Fprintf(stdout, "  %-30s %-12s %s\n", p.Name, p.Version, strings.Join(p.Modules, " "))
		}
		return exitOK
	}
	if name == "" {
		fmt.Fprintln(stderr, usage)
		return exitUsage
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	res, err := svc.InstallLayerPackage(ctx, name, *version)
	if err != nil {
		fmt.Fprintln(stderr, "codecage packages:", err)
		return exitUsage
	}
	if *asJSON {
		printJSON(stdout, res)
	} else {
		fmt.Fprintln(stdout, res.Message)
		for _, w := range res.Warnings {
			fmt.Fprintln(stdout, "warning:", w)
		}
		if !res.Success && res.Log != "" {
			fmt.Fprintln(stderr, res.Log)
		}
	}
	if !res.Success {
		return exitFailure
	}
	return exitOK
}
