package cli

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/codecage/codecage/internal/service"
)

// The human output of the client commands: ids alone where a script takes
// them (create, snapshot, fork), tables for lists, one field a line for
// show. Every string the server sends is passed through forTerminal.

// decode reads the server's answer into v, or reports it.
func (c *clientCmd) decode(data json.RawMessage, v any) bool {
	if err := json.Unmarshal(data, v); err != nil {
		fmt.Fprintf(c.stderr, "codecage %s: the server's answer is not what this client reads: %v\n", c.name, err)
		return false
	}
	return true
}

func (c *clientCmd) text(s string) string { return forTerminal(c.stdout, s) }

func when(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.Local().Format("2006-01-02 15:04:05")
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func (c *clientCmd) printSessionList(data json.RawMessage) int {
	var list struct {
		Sessions []service.SessionInfo `json:"sessions"`
	}
	if !c.decode(data, &list) {
		return exitInternal
	}
	if len(list.Sessions) == 0 {
		fmt.Fprintln(c.stderr, "no sessions")
		return exitOK
	}
	tw := tabwriter.NewWriter(c.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "SESSION\tSTATE\tBACKEND\tRUNS\tCREATED\tEXPIRES\tFROM SNAPSHOT")
	for _, s := range list.Sessions {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\t%s\n", c.text(s.ID), c.text(sessionState(s)), c.text(s.Backend), s.Runs,
			when(s.CreatedAt), when(s.ExpiresAt), c.text(orDash(s.FromSnapshot)))
	}
	_ = tw.Flush()
	return exitOK
}

// sessionState is the state, or why the session ended.
func sessionState(s service.SessionInfo) string {
	if s.Ended != "" {
		return "ended (" + s.Ended + ")"
	}
	return s.State
}

func (c *clientCmd) printSession(data json.RawMessage) int {
	var s service.SessionInfo
	if !c.decode(data, &s) {
		return exitInternal
	}
	tw := tabwriter.NewWriter(c.stdout, 0, 0, 2, ' ', 0)
	row := func(k, v string) { fmt.Fprintf(tw, "%s:\t%s\n", k, c.text(v)) }
	row("session", s.ID)
	row("state", sessionState(s))
	if s.PausedAt != nil {
		row("paused at", when(*s.PausedAt))
	}
	row("backend", s.Backend)
	row("profiles", strings.Join(s.Profiles, ","))
	row("runs", strconv.Itoa(s.Runs))
	row("created", when(s.CreatedAt))
	row("last used", when(s.LastUsed))
	row("expires", when(s.ExpiresAt))
	row("on timeout", s.OnTimeout)
	row("auto resume", strconv.FormatBool(s.AutoResume))
	row("home", s.Home)
	if s.FromSnapshot != "" {
		row("from snapshot", s.FromSnapshot)
	}
	if s.Template != "" {
		row("template", s.Template)
	}
	_ = tw.Flush()
	return exitOK
}

// printSessionState is the answer of pause and resume: "ID paused".
func (c *clientCmd) printSessionState(data json.RawMessage) int {
	var s service.SessionInfo
	if !c.decode(data, &s) {
		return exitInternal
	}
	fmt.Fprintf(c.stdout, "%s %s\n", c.text(s.ID), c.text(sessionState(s)))
	return exitOK
}

// printCreated prints the new session's id alone: id=$(codecage sessions create).
func (c *clientCmd) printCreated(data json.RawMessage) int {
	var s service.SessionInfo
	if !c.decode(data, &s) {
		return exitInternal
	}
	fmt.Fprintln(c.stdout, c.text(s.ID))
	return exitOK
}

// printSnapshotMade prints the snapshot's id alone, and on stderr what of
// the session's state it could not save.
func (c *clientCmd) printSnapshotMade(data json.RawMessage) int {
	var sn service.SnapshotInfo
	if !c.decode(data, &sn) {
		return exitInternal
	}
	fmt.Fprintln(c.stdout, c.text(sn.ID))
	c.warnNotSaved(sn)
	return exitOK
}

func (c *clientCmd) warnNotSaved(sn service.SnapshotInfo) {
	for _, n := range sn.NotSaved {
		fmt.Fprintf(c.stderr, "codecage %s: not saved: %s\n", c.name, forTerminal(c.stderr, n))
	}
}

// printForks prints each copy's session id, one a line (when human), and
// each copy that failed on stderr; a failed copy makes the status
// exitRefused.
func (c *clientCmd) printForks(data json.RawMessage, human bool) int {
	var out struct {
		Sessions []service.ForkResult `json:"sessions"`
	}
	if !c.decode(data, &out) {
		return exitInternal
	}
	status := exitOK
	for i, r := range out.Sessions {
		switch {
		case r.Error != nil:
			fmt.Fprintf(c.stderr, "codecage %s: copy %d: %s\n", c.name, i+1, forTerminal(c.stderr, r.Error.Kind+": "+r.Error.Message))
			status = exitRefused
		case r.Session != nil && human:
			fmt.Fprintln(c.stdout, c.text(r.Session.ID))
		}
	}
	return status
}

func (c *clientCmd) printSnapshotList(data json.RawMessage) int {
	var list struct {
		Snapshots []service.SnapshotInfo `json:"snapshots"`
	}
	if !c.decode(data, &list) {
		return exitInternal
	}
	if len(list.Snapshots) == 0 {
		fmt.Fprintln(c.stderr, "no snapshots")
		return exitOK
	}
	tw := tabwriter.NewWriter(c.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "SNAPSHOT\tNAME\tSESSION\tBACKEND\tSIZE\tCREATED\tEXPIRES\tNOT SAVED")
	for _, sn := range list.Snapshots {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\n", c.text(sn.ID), c.text(orDash(sn.Name)), c.text(sn.SessionID), c.text(sn.Backend),
			byteSize(sn.SizeBytes), when(sn.CreatedAt), when(sn.ExpiresAt), len(sn.NotSaved))
	}
	_ = tw.Flush()
	return exitOK
}

// byteSize is n in B, KiB, MiB or GiB.
func byteSize(n int64) string {
	const unit = 1024
	if n < unit {
		return strconv.FormatInt(n, 10) + " B"
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit && exp < 2; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMG"[exp])
}
