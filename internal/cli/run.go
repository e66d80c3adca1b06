package cli

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/codecage/codecage/internal/config"
	"github.com/codecage/codecage/internal/service"
)

// listFlag collects a comma-separated list, repeatable.
type listFlag []string

func (l *listFlag) String() string { return strings.Join(*l, ",") }

func (l *listFlag) Set(v string) error {
	for _, item := range strings.Split(v, ",") {
		if item = strings.TrimSpace(item); item != "" {
			*l = append(*l, item)
		}
	}
	return nil
}

func runCmd(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		memBytes = sizeFlag(fs, "max-memory-mb", "m", "memory limit of this run in MiB, or a size such as 1g (default: the configured default)")
		cpuTime  = secondsFlag(fs, "max-cpu-time-sec", "CPU-time limit of this run in seconds")
		printLen = sizeFlag(fs, "max-print-length", "", "cap on stdout and stderr of this run, each, in bytes")
		asJSON   = fs.Bool("json", false, "print one JSON result object")
		gvisor   = fs.Bool("use-container", false, "run under gVisor (runsc) instead of the native jail")
		envName  = fs.String("environment", "", "run in this environment (codecage env list; default: the host's own)")
		tools    listFlag
	)
	fs.Var(&tools, "tools", "upstream tools the code may call (server.tool, server.* or server; comma-separated; default: every tool of SANDBOX_TOOLS_CONFIG)")
	in := addCodeInput(fs, "run")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "Usage: codecage run [flags] [file|-]\n\nRuns Python code from --code, a file, or standard input in a fresh sandbox.\n\nFlags:")
		in.config.printFlags(stderr)
	}
	if status, ok := parse(fs, args); !ok {
		return status
	}
	if *gvisor {
		// Whoever runs the CLI is its operator: asking is enabling.
		if _, set := in.config.extra["enable_container_mode"]; !set {
			in.config.extra["enable_container_mode"] = "true"
		}
	}
	in.tools = true // code mode: the code's tools object, as under serve and mcp
	src, svc, stopService, status := in.start(fs, stdin, stderr, "run")
	if svc == nil {
		return status
	}
	defer stopService()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	res, err := svc.Execute(ctx, service.Request{
		Code:         src,
		CPUTime:      *cpuTime,
		MemoryBytes:  *memBytes,
		OutputBytes:  *printLen,
		Profiles:     in.profiles,
		UseContainer: *gvisor,
		Tools:        tools,
		Environment:  *envName,
	})
	if err != nil {
		fmt.Fprintln(stderr, "codecage run:", err)
		if errors.Is(err, service.ErrInvalidRequest) || errors.Is(err, service.ErrEnvironmentNotFound) {
			return exitUsage
		}
		return exitInternal
	}
	if *asJSON {
		printJSON(stdout, res)
	} else {
		printHuman(res, stdout, stderr)
	}
	if !res.Success {
		if res.ExitCode > 0 {
			return res.ExitCode
		}
		return exitFailure
	}
	return exitOK
}

// oneShot keeps a command that runs once from starting warm pools and
// spare sessions (a spare machine cost `codecage run` about 2 s of CPU).
func oneShot(cf *configFlags) {
	for _, k := range []string{"pool_size", "data_science_pool_size", "gvisor_pool_size", "gvisor_data_science_pool_size", "session_pool_size", "gvisor_session_pool_size", "machine_pool_size", "env_pool_size"} {
		if _, set := cf.extra[k]; !set {
			cf.extra[k] = "0"
		}
	}
}

// newService loads the configuration and starts the service, or reports
// why not and returns the exit status.
func newService(cf *configFlags, stderr io.Writer, cmd string) (*service.Service, int) {
	cfg, ok := loadConfig(cf, stderr, cmd)
	if !ok {
		return nil, exitUsage
	}
	return startService(cfg, nil, stderr, cmd)
}

// loadConfig loads the configuration, or reports why not.
func loadConfig(cf *configFlags, stderr io.Writer, cmd string) (config.Config, bool) {
	cfg, err := cf.load()
	if err != nil {
		fmt.Fprintf(stderr, "codecage %s: configuration: %v\n", cmd, err)
		return cfg, false
	}
	return cfg, true
}

// startService starts the service, or reports why not and returns the
// exit status.
func startService(cfg config.Config, opts *service.Options, stderr io.Writer, cmd string) (*service.Service, int) {
	svc, err := service.New(cfg, opts)
	if err != nil {
		fmt.Fprintf(stderr, "codecage %s: %v (run \"codecage doctor\")\n", cmd, err)
		return nil, exitInternal
	}
	return svc, exitOK
}

func printJSON(w io.Writer, v any) {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}
