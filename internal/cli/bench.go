package cli

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/codecage/codecage/internal/bench"
)

// benchCmd measures this host: warm-pool latency and throughput of
// print(1) and numpy, HumanEval, idle memory, and the bare interpreter.
func benchCmd(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		asJSON    = fs.Bool("json", false, "print one JSON object with every number")
		n         = fs.Int("n", 0, fmt.Sprintf("sequential print(1) runs; the concurrent case runs 2N, numpy N/2 and N (default %d, %d with --quick)", bench.DefaultN, bench.QuickN))
		clients   = fs.Int("clients", bench.DefaultClients, "concurrent clients")
		humaneval = fs.String("humaneval", "", "HumanEval JSONL(.gz) file to run instead of the embedded set")
		skipMBPP  = fs.Bool("skip-mbpp", false, "leave out MBPP (974 programs)")
		gvOnly    = fs.Bool("gvisor-only", false, "measure the gVisor cases alone (use_container, pooled and cold; compare runsc builds and platforms with --runsc and --gvisor-platform)")
		envOnly   = fs.Bool("env-only", false, "measure the environment rows alone (builds from a wheelhouse and an image tarball, first and warm runs, zygote memory)")
		skipEnv   = fs.Bool("skip-env", false, "leave out the environment rows")
		suites    = fs.Bool("suites-only", false, "run HumanEval and MBPP alone (with --humaneval, a problem file of your own)")
		quick     = fs.Bool("quick", false, fmt.Sprintf("a short run: N=%d and the first %d HumanEval and MBPP problems", bench.QuickN, bench.QuickHumanEval))
	)
	cf := addConfigFlags(fs)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "Usage: codecage bench [--json] [--n N] [--clients C] [--humaneval PATH] [--skip-mbpp] [--quick] [--gvisor-only|--env-only|--suites-only] [--skip-env] [config flags]\n\n"+
			"Measures stateless runs from the warm pools (print(1), numpy), HumanEval and MBPP (built in)\n"+
			"under the default policy, the idle memory of a pooled sandbox, and a bare python3 (and\n"+
			"bwrap) for comparison.\n\nFlags:")
		cf.printFlags(stderr)
	}
	if code, ok := parse(fs, args); !ok {
		return code
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "codecage bench: unexpected argument %q\n", fs.Arg(0))
		return exitUsage
	}
	only := 0
	for _, set := range []bool{*gvOnly, *envOnly, *suites} {
		if set {
			only++
		}
	}
	if only > 1 {
		fmt.Fprintln(stderr, "codecage bench: give at most one of --gvisor-only, --env-only and --suites-only")
		return exitUsage
	}
	if *n < 0 || *clients < 1 {
		fmt.Fprintln(stderr, "codecage bench: --n must be positive and --clients at least 1")
		return exitUsage
	}
	if *humaneval != "" {
		if _, err := os.Stat(*humaneval); err != nil {
			fmt.Fprintln(stderr, "codecage bench: --humaneval:", err)
			return exitUsage
		}
	}
	// The numpy case needs the data_science profile; the warm pools stay
	// on (no oneShot): they are what is measured.
	cf.extra["enable_data_science"] = "true"
	cfg, ok := loadConfig(cf, stderr, "bench")
	if !ok {
		return exitUsage
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	rep, err := bench.Run(ctx, bench.Options{
		Config:           cfg,
		N:                *n,
		Clients:          *clients,
		HumanEvalPath:    *humaneval,
		SkipMBPP:         *skipMBPP,
		Quick:            *quick,
		GVisorOnly:       *gvOnly,
		EnvOnly:          *envOnly,
		SkipEnvironments: *skipEnv,
		SuitesOnly:       *suites,
		Progress:         stderr,
	})
	if err != nil {
		hint := ""
		if bench.IsUnavailable(err) {
			hint = " (run \"codecage doctor\")"
		}
		fmt.Fprintf(stderr, "codecage bench: %v%s\n", err, hint)
		return exitInternal
	}
	if *asJSON {
		printJSON(stdout, rep)
		return exitOK
	}
	if err := rep.WriteTable(stdout); err != nil {
		fmt.Fprintln(stderr, "codecage bench:", err)
		return exitInternal
	}
	return exitOK
}
