package cli

import (
	"flag"
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
}

func addConfigFlags(fs *flag.FlagSet) *configFlags {
	c := &configFlags{fs: fs, extra: map[string]string{}}
	fs.StringVar(&c.file, "config", "", "JSON configuration file (default $SANDBOX_CONFIG)")
	for _, s := range config.SettingKeys() {
		fs.String(strings.ReplaceAll(s[0], "_", "-"), "", s[2]+" ("+s[1]+")")
	}
	return c
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
