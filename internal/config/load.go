package config

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sort"
	"strings"

	"github.com/codecage/codecage/internal/policy"
)

// ConfigError is a bad value in one source of configuration.
type ConfigError struct {
	Source string // e.g. "SANDBOX_TIMEOUT", "--timeout", "codecage.json: timeout"
	Value  string
	Err    error
}

func (e *ConfigError) Error() string {
	return fmt.Sprintf("%s=%q: %v", e.Source, e.Value, e.Err)
}

func (e *ConfigError) Unwrap() error { return e.Err }

// ConfigFileEnv names the JSON file when --config does not.
const ConfigFileEnv = "SANDBOX_CONFIG"

// Load builds the configuration: defaults, then the JSON file (path, else
// $SANDBOX_CONFIG, if either is set), then the environment (getenv), then
// flags (key -> value). Every value is validated; the first bad one is
// returned as a *ConfigError.
func Load(path string, getenv func(string) string, flags map[string]string) (Config, error) {
	c := DefaultConfig()
	if path == "" {
		path = getenv(ConfigFileEnv)
	}
	if path != "" {
		if err := c.loadFile(path); err != nil {
			return c, err
		}
	}
	for _, s := range settings {
		if v := getenv(s.Env); v != "" {
			if err := s.set(&c, v); err != nil {
				return c, &ConfigError{s.Env, v, err}
			}
		}
	}
	keys := make([]string, 0, len(flags))
	for k := range flags {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		s, ok := lookupSetting(k)
		if !ok {
			return c, &ConfigError{"--" + k, flags[k], errors.New("unknown setting")}
		}
		if err := s.set(&c, flags[k]); err != nil {
			return c, &ConfigError{"--" + strings.ReplaceAll(k, "_", "-"), flags[k], err}
		}
	}
	return c, c.validate()
}

// EnvValue is one setting's value from the environment alone ("" when
// unset), validated as Load would: for a command that needs that one
// setting and not the whole configuration (codecage audit's database).
func EnvValue(key string, getenv func(string) string) (string, error) {
	s, ok := lookupSetting(key)
	if !ok {
		return "", fmt.Errorf("unknown setting %q", key)
	}
	v := getenv(s.Env)
	if v == "" {
		return "", nil
	}
	c := DefaultConfig()
	if err := s.set(&c, v); err != nil {
		return "", &ConfigError{s.Env, v, err}
	}
	return v, nil
}

func (c *Config) loadFile(path string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("config file: %w", err)
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(b, &raw); err != nil {
		return fmt.Errorf("config file %s: %w", path, err)
	}
	keys := make([]string, 0, len(raw))
	for k := range raw {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		s, ok := lookupSetting(k)
		if !ok {
			return &ConfigError{path + ": " + k, string(raw[k]), errors.New("unknown setting")}
		}
		v := string(raw[k])
		var str string
		if json.Unmarshal(raw[k], &str) == nil {
			v = str // strings are taken as written; numbers and bools as JSON text
		} else {
			var list []string
			if json.Unmarshal(raw[k], &list) == nil {
				v = strings.Join(list, ",")
			}
		}
		if err := s.set(c, v); err != nil {
			return &ConfigError{path + ": " + k, v, err}
		}
	}
	return nil
}

// validate checks the values against each other.
func (c *Config) validate() error {
	pairs := []struct {
		name      string
		def, max  int64
		defEnv    string
		maxEnvVar string
	}{
		{"timeout", int64(c.Timeout), int64(c.MaxTimeout), "SANDBOX_TIMEOUT", "SANDBOX_MAX_TIMEOUT"},
		{"cpu_time", int64(c.CPUTime), int64(c.MaxCPUTime), "SANDBOX_CPU_TIME", "SANDBOX_MAX_CPU_TIME"},
		{"memory", c.MemoryLimit, c.MaxMemory, "SANDBOX_DEFAULT_MEMORY_LIMIT", "SANDBOX_MAX_MEMORY_LIMIT"},
		{"data_science memory", c.DataMemory, c.MaxMemory, "SANDBOX_DATA_SCIENCE_MEMORY_LIMIT", "SANDBOX_MAX_MEMORY_LIMIT"},
		{"output", c.OutputSize, c.MaxOutput, "SANDBOX_MAX_OUTPUT_SIZE", "SANDBOX_MAX_OUTPUT_LIMIT"},
	}
	for _, p := range pairs {
		if p.def > p.max {
			return fmt.Errorf("%s default (%s) is above its maximum (%s)", p.name, p.defEnv, p.maxEnvVar)
		}
	}
	if c.MemoryLimit < MinMemory || c.DataMemory < MinMemory {
		return fmt.Errorf("memory limits must be at least %d MiB", MinMemory>>20)
	}
	if c.IdleCPU > c.CPULimit {
		return fmt.Errorf("session idle CPU (SANDBOX_SESSION_IDLE_CPU=%g) is above the CPU limit (SANDBOX_CPU_LIMIT=%g)", c.IdleCPU, c.CPULimit)
	}
	for _, k := range c.Kernels {
		switch k {
		case "python", "javascript", "typescript", "bash":
		default:
			return fmt.Errorf("SANDBOX_KERNELS: no kernel for %q (python, javascript, typescript, bash)", k)
		}
	}
	if c.CommandTimeout > c.MaxCommandTime {
		return errors.New("command timeout default (SANDBOX_COMMAND_TIMEOUT) is above its maximum (SANDBOX_MAX_COMMAND_TIMEOUT)")
	}
	if n, names := c.readySandboxes(); n > c.MaxSandboxes {
		return fmt.Errorf("the sandboxes kept ready (%s: %d) exceed SANDBOX_MAX_SANDBOXES (%d), which bounds every sandbox, ready ones included", strings.Join(names, " + "), n, c.MaxSandboxes)
	}
	if c.DefaultProfiles != nil && len(c.DefaultProfiles) == 0 {
		return errors.New("SANDBOX_DEFAULT_PROFILES is empty (want e.g. basic, or leave it unset for every enabled profile)")
	}
	for _, name := range c.DefaultProfiles {
		p, ok := policy.LookupProfile(name)
		if !ok {
			return fmt.Errorf("SANDBOX_DEFAULT_PROFILES: unknown profile %q (known: %s)", name, strings.Join(policy.ProfileNames(), ", "))
		}
		if !c.ProfileEnabled(name) {
			return fmt.Errorf("SANDBOX_DEFAULT_PROFILES names %s, which is not enabled (%s=true)", name, p.Setting)
		}
	}
	return nil
}
