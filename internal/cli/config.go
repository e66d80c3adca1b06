package cli

import (
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/codecage/codecage/internal/config"
)

// configFlags registers every operator setting as a flag (--timeout,
// --enable-network, ...) plus --config, so each command takes the same
// configuration from flags, SANDBOX_* variables and a JSON file.
type configFlags struct {
	fs   *flag.FlagSet
	file string
	// extra are values set by a command's own flags (e.g. --profile
	// enabling a profile), applied like flags.
	extra map[string]string
	// shared names the flags added here that a command's help lists
	// after its own, under a heading.
	shared map[string]bool
}

// addConfigFlags adds the operator settings to fs, and a help that lists
// the command's own flags before them (a command with a usage text of its
// own prints it, then calls printFlags).
func addConfigFlags(fs *flag.FlagSet) *configFlags {
	c := &configFlags{fs: fs, extra: map[string]string{}, shared: map[string]bool{"config": true}}
	fs.StringVar(&c.file, "config", "", "JSON configuration file (default $SANDBOX_CONFIG)")
	for _, s := range config.SettingKeys() {
		name := strings.ReplaceAll(s[0], "_", "-")
		fs.String(name, "", s[2]+" ("+s[1]+")")
		c.shared[name] = true
	}
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage of codecage %s:\n", fs.Name())
		c.printFlags(fs.Output())
	}
	return c
}

// own lists settings among the command's own flags in its help (serve's
// --listen).
func (c *configFlags) own(names ...string) {
	for _, n := range names {
		delete(c.shared, n)
	}
}

// printFlags prints the flags as PrintDefaults does: the command's own
// first, then the 60-odd operator settings every command shares, under a
// heading of their own, so that they do not bury the command's.
func (c *configFlags) printFlags(w io.Writer) {
	own := flag.NewFlagSet(c.fs.Name(), flag.ContinueOnError)
	shared := flag.NewFlagSet(c.fs.Name(), flag.ContinueOnError)
	c.fs.VisitAll(func(f *flag.Flag) {
		to := own
		if c.shared[f.Name] {
			to = shared
		}
		to.Var(f.Value, f.Name, f.Usage)
		to.Lookup(f.Name).DefValue = f.DefValue
	})
	own.SetOutput(w)
	own.PrintDefaults()
	if hasFlags(own) {
		fmt.Fprintln(w)
	}
	fmt.Fprintln(w, "Operator settings, shared by every command (also as SANDBOX_* variables, or in --config FILE):")
	shared.SetOutput(w)
	shared.PrintDefaults()
}

func hasFlags(fs *flag.FlagSet) bool {
	n := 0
	fs.VisitAll(func(*flag.Flag) { n++ })
	return n > 0
}

// load returns the configuration with flag values over the environment
// over the file over the defaults.
func (c *configFlags) load() (config.Config, error) {
	values := map[string]string{}
	for k, v := range c.extra {
		values[k] = v
	}
	c.fs.Visit(func(f *flag.Flag) {
		if f.Name == "config" {
			return
		}
		if _, ok := lookupKey(f.Name); ok {
			values[f.Name] = f.Value.String()
		}
	})
	return config.Load(c.file, os.Getenv, values)
}

func lookupKey(flagName string) (string, bool) {
	key := strings.ReplaceAll(flagName, "-", "_")
	for _, s := range config.SettingKeys() {
		if s[0] == key {
			return key, true
		}
	}
	return "", false
}

// allow records what a command-line user asked for: on the command line
// the user is the operator, so asking for a profile or an import list is
// also allowing it.
func (c *configFlags) allow(profiles, imports []string) {
	for _, p := range profiles {
		if key, ok := lookupKey("enable-" + p); ok {
			c.extra[key] = "true"
		}
	}
	if len(imports) > 0 {
		c.extra["allowed_imports"] = strings.Join(imports, ",")
	}
}
