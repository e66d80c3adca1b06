package cli

import (
	"flag"
	"strconv"
	"strings"
	"time"

	"github.com/codecage/codecage/internal/config"
)

// A run's own limit flags are checked by the configuration loader's
// parsers, so a flag refuses what its SANDBOX_* variable refuses (NaN,
// infinities, values that would overflow once converted) and the flag
// package names the flag in the error.

// secondsFlag registers a duration flag given in seconds.
func secondsFlag(fs *flag.FlagSet, name, usage string) *time.Duration {
	d := new(time.Duration)
	fs.Func(name, usage, func(v string) (err error) {
		*d, err = config.ParseSeconds(v)
		return err
	})
	return d
}

// sizeFlag registers a byte-size flag; a bare number counts in unit
// (e.g. "m" for a flag in MiB), a suffix such as 1g overrides it.
func sizeFlag(fs *flag.FlagSet, name, unit, usage string) *int64 {
	n := new(int64)
	fs.Func(name, usage, func(v string) (err error) {
		v = strings.TrimSpace(v)
		if _, perr := strconv.ParseFloat(v, 64); perr == nil {
			v += unit
		}
		*n, err = config.ParseSize(v)
		return err
	})
	return n
}
