package config

import (
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
)

// MinMemory is the smallest memory limit a run may have: the interpreter
// alone needs about 10 MiB.
const MinMemory = 16 << 20

func durationSetting(key, env, usage string, field func(*Config) *time.Duration) setting {
	return setting{Key: key, Env: env, Usage: usage,
		get: func(c *Config) string { return strconv.FormatFloat(field(c).Seconds(), 'f', -1, 64) },
		set: func(c *Config, v string) error {
			d, err := ParseSeconds(v)
			if err != nil {
				return err
			}
			*field(c) = d
			return nil
		}}
}

// MaxSeconds bounds every duration setting: a day is longer than any run.
const MaxSeconds = 86400

// ParseSeconds reads a duration in seconds ("30", "1.5", "30s"), above 0
// and at most MaxSeconds. NaN and infinities are refused: converted to a
// time.Duration they would wrap to a negative one.
func ParseSeconds(v string) (time.Duration, error) {
	f, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), "s"), 64)
	if err != nil || !(f > 0 && f <= MaxSeconds) { // NaN fails too
		return 0, fmt.Errorf("want a number of seconds between 0 and %d", MaxSeconds)
	}
	return time.Duration(f * float64(time.Second)), nil
}

// MinSnapshotSecret is the shortest SANDBOX_SNAPSHOT_SECRET (snapstore's
// MinSecretLen).
const MinSnapshotSecret = 32

// MaxLongDuration bounds durations that outlive runs (snapshot TTL).
const MaxLongDuration = 365 * 24 * time.Hour

// longDurationSetting reads seconds ("3600") or a number with a unit: s,
// m, h or d ("12h", "7d"), above 0 and at most MaxLongDuration.
func longDurationSetting(key, env, usage string, field func(*Config) *time.Duration) setting {
	return setting{Key: key, Env: env, Usage: usage, kind: kindLongDuration,
		get: func(c *Config) string { return strconv.FormatFloat(field(c).Seconds(), 'f', -1, 64) },
		set: func(c *Config, v string) error {
			d, err := parseLongDuration(v)
			if err != nil {
				return err
			}
			*field(c) = d
			return nil
		}}
}

func parseLongDuration(v string) (time.Duration, error) {
	s := strings.ToLower(strings.TrimSpace(v))
	unit := time.Second
	if n := len(s); n > 0 {
		switch s[n-1] {
		case 's':
			s = s[:n-1]
		case 'm':
			unit, s = time.Minute, s[:n-1]
		case 'h':
			unit, s = time.Hour, s[:n-1]
		case 'd':
			unit, s = 24*time.Hour, s[:n-1]
		}
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || !(f > 0 && f*float64(unit) <= float64(MaxLongDuration)) { // NaN fails too
		return 0, fmt.Errorf("want seconds, or a number with s, m, h or d (e.g. 7d), up to %d days", MaxLongDuration/(24*time.Hour))
	}
	return time.Duration(f * float64(unit)), nil
}

// MinCPUCores and MaxCPUCores bound a CPU bandwidth setting: the kernel
// refuses a quota under 1 ms per 100 ms period, and more than 1024 cores
// is a typo, not a machine.
const (
	MinCPUCores = 0.01
	MaxCPUCores = 1024
)

// coresSetting reads a CPU bandwidth in cores (a fraction is a share of one).
func coresSetting(key, env, usage string, field func(*Config) *float64) setting {
	return setting{Key: key, Env: env, Usage: usage,
		get: func(c *Config) string { return strconv.FormatFloat(*field(c), 'f', -1, 64) },
		set: func(c *Config, v string) error {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err != nil || !(f >= MinCPUCores && f <= MaxCPUCores) { // NaN fails too
				return fmt.Errorf("want a number of cores from %g to %d", MinCPUCores, MaxCPUCores)
			}
			*field(c) = f
			return nil
		}}
}

func pathSetting(key, env, usage string, field func(*Config) *string) setting {
	return setting{Key: key, Env: env, Usage: usage,
		get: func(c *Config) string { return *field(c) },
		set: func(c *Config, v string) error {
			if !strings.HasPrefix(v, "/") {
				return errors.New("must be an absolute path")
			}
			*field(c) = v
			return nil
		}}
}

func stringSetting(key, env, usage string, field func(*Config) *string) setting {
	return setting{Key: key, Env: env, Usage: usage,
		get: func(c *Config) string { return *field(c) },
		set: func(c *Config, v string) error { *field(c) = strings.TrimSpace(v); return nil }}
}

// dbSetting takes an absolute path or a PostgreSQL URL.
func dbSetting(key, env, usage string, field func(*Config) *string) setting {
	return setting{Key: key, Env: env, Usage: usage,
		get: func(c *Config) string { return redactURL(*field(c)) },
		set: func(c *Config, v string) error {
			l := strings.ToLower(v)
			if !strings.HasPrefix(v, "/") && !strings.HasPrefix(l, "postgres://") && !strings.HasPrefix(l, "postgresql://") {
				return errors.New("must be an absolute path or a postgres:// URL")
			}
			*field(c) = v
			return nil
		}}
}

// redactURL hides the password of a URL, for display.
func redactURL(v string) string {
	u, err := url.Parse(v)
	if err != nil || u.User == nil {
		return v
	}
	if _, ok := u.User.Password(); !ok {
		return v
	}
	return u.Redacted()
}

func choiceSetting(key, env, usage string, choices []string, field func(*Config) *string) setting {
	return setting{Key: key, Env: env, Usage: usage,
		get: func(c *Config) string { return *field(c) },
		set: func(c *Config, v string) error {
			v = strings.ToLower(strings.TrimSpace(v))
			if !slices.Contains(choices, v) {
				return fmt.Errorf("want one of %s", strings.Join(choices, ", "))
			}
			*field(c) = v
			return nil
		}}
}

func sizeSetting(key, env, usage string, field func(*Config) *int64) setting {
	return setting{Key: key, Env: env, Usage: usage, kind: kindSize,
		get: func(c *Config) string { return strconv.FormatInt(*field(c), 10) },
		set: func(c *Config, v string) error {
			n, err := ParseSize(v)
			if err != nil {
				return err
			}
			*field(c) = n
			return nil
		}}
}

func intSetting(key, env, usage string, field func(*Config) *int) setting {
	return setting{Key: key, Env: env, Usage: usage,
		get: func(c *Config) string { return strconv.Itoa(*field(c)) },
		set: func(c *Config, v string) error {
			n, err := strconv.Atoi(strings.TrimSpace(v))
			if err != nil || n <= 0 || n > 1<<20 {
				return errors.New("want a positive whole number")
			}
			*field(c) = n
			return nil
		}}
}

// countSetting is like intSetting but allows zero.
func countSetting(key, env, usage string, field func(*Config) *int) setting {
	return setting{Key: key, Env: env, Usage: usage,
		get: func(c *Config) string { return strconv.Itoa(*field(c)) },
		set: func(c *Config, v string) error {
			n, err := strconv.Atoi(strings.TrimSpace(v))
			if err != nil || n < 0 || n > 1024 {
				return errors.New("want a whole number from 0 to 1024")
			}
			*field(c) = n
			return nil
		}}
}

// keyShareSetting is a key's share of a server-wide bound: auto
// (KeyShareAuto) or a whole number, 0 for no share.
func keyShareSetting(key, env, usage string, field func(*Config) *int) setting {
	return setting{Key: key, Env: env, Usage: usage,
		get: func(c *Config) string {
			if *field(c) == KeyShareAuto {
				return "auto"
			}
			return strconv.Itoa(*field(c))
		},
		set: func(c *Config, v string) error {
			v = strings.TrimSpace(v)
			if strings.EqualFold(v, "auto") {
				*field(c) = KeyShareAuto
				return nil
			}
			n, err := strconv.Atoi(v)
			if err != nil || n < 0 || n > 1<<20 {
				return errors.New("want auto or a whole number from 0 (no share)")
			}
			*field(c) = n
			return nil
		}}
}

func boolSetting(key, env, usage string, field func(*Config) *bool) setting {
	return setting{Key: key, Env: env, Usage: usage,
		get: func(c *Config) string { return strconv.FormatBool(*field(c)) },
		set: func(c *Config, v string) error {
			switch strings.ToLower(strings.TrimSpace(v)) {
			case "1", "true", "yes", "on":
				*field(c) = true
			case "0", "false", "no", "off":
				*field(c) = false
			default:
				return errors.New("want true or false")
			}
			return nil
		}}
}

func listSetting(key, env, usage string, field func(*Config) *[]string) setting {
	return setting{Key: key, Env: env, Usage: usage,
		get: func(c *Config) string { return strings.Join(*field(c), ",") },
		set: func(c *Config, v string) error {
			list := []string{}
			for _, item := range strings.Split(v, ",") {
				if item = strings.TrimSpace(item); item != "" && !slices.Contains(list, item) {
					list = append(list, item)
				}
			}
			*field(c) = list
			return nil
		}}
}

// MaxSize bounds every size setting (1 PiB): far above any machine, far
// below where int64 arithmetic on it could overflow.
const MaxSize = 1 << 50

// ParseSize reads a byte size: "1048576", "512k", "128m", "4g" (binary units).
func ParseSize(v string) (int64, error) {
	s := strings.ToLower(strings.TrimSpace(v))
	s = strings.TrimSuffix(strings.TrimSuffix(s, "b"), "i")
	mult := int64(1)
	if n := len(s); n > 0 {
		switch s[n-1] {
		case 'k':
			mult, s = 1<<10, s[:n-1]
		case 'm':
			mult, s = 1<<20, s[:n-1]
		case 'g':
			mult, s = 1<<30, s[:n-1]
		case 't':
			mult, s = 1<<40, s[:n-1]
		}
	}
	n, err := strconv.ParseFloat(s, 64)
	if err != nil || !(n > 0 && n*float64(mult) <= MaxSize) { // NaN fails too
		return 0, errors.New("want a positive size such as 1048576, 512k, 128m or 4g")
	}
	return int64(n * float64(mult)), nil
}
