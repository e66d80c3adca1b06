package cli

import (
	"errors"
	"flag"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// sessionsCreate is POST /sessions; it prints the new session's id.
func sessionsCreate(c *clientCmd, args []string) int {
	var (
		from         = c.fs.String("from-snapshot", "", "start from this snapshot (its id): its workspace files and variables")
		onTimeout    = c.fs.String("on-timeout", "", "what the end of the session's life does: kill (the server's default) or pause")
		lifetime     = secondsValue(c.fs, "lifetime", "the session's lifetime, used or not (90s, 10m, 2h, or seconds; default: the server's idle rule)")
		manualResume = c.fs.Bool("manual-resume", false, "a paused session is resumed only by \"sessions resume\", not by its next request")
		profile      = c.fs.String("profile", "", "capability profiles, comma-separated (default: every enabled profile)")
		container    = c.fs.Bool("use-container", false, "run the session under gVisor (where the server enabled container mode)")
		environment  = c.fs.String("environment", "", "start the session from this environment (the server's env list; default: its own)")
		machine      = c.fs.Bool("machine", false, "make the session a small computer: commands in its own process tree, where background processes live on, any program of its root")
	)
	if status, ok := c.parse(args, 0, 0, ""); !ok {
		return status
	}
	// Only what was given is sent: the server's defaults stay its own.
	body := map[string]any{}
	set := func(k string, v any, given bool) {
		if given {
			body[k] = v
		}
	}
	set("from_snapshot", *from, *from != "")
	set("on_timeout", *onTimeout, *onTimeout != "")
	set("lifetime", *lifetime, *lifetime != 0)
	set("auto_resume", false, *manualResume)
	set("profile", *profile, *profile != "")
	set("use_container", true, *container)
	set("environment", *environment, *environment != "")
	set("machine", true, *machine)
	data, status, ok := c.call(http.MethodPost, "/sessions", nil, body)
	if !ok {
		return status
	}
	if c.json {
		c.printJSON(data)
		return exitOK
	}
	return c.printCreated(data)
}

// secondsValue registers a flag of seconds given as a number or a Go
// duration (90s, 10m, 2h), sent to the server as seconds; the server
// judges its range.
func secondsValue(fs *flag.FlagSet, name, usage string) *float64 {
	v := new(float64)
	fs.Func(name, usage, func(s string) error {
		s = strings.TrimSpace(s)
		f, err := strconv.ParseFloat(s, 64)
		if err != nil {
			d, derr := time.ParseDuration(s)
			if derr != nil {
				return errors.New("want a duration such as 90s, 10m or 2h, or seconds")
			}
			f = d.Seconds()
		}
		if math.IsNaN(f) || math.IsInf(f, 0) || f <= 0 {
			return errors.New("want a duration above 0")
		}
		*v = f
		return nil
	})
	return v
}
