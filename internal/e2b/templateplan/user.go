package templateplan

import (
	"fmt"
	"regexp"
	"strings"

	"github.com/codecage/codecage/internal/service"
)

// Build steps' users. E2B's setUser and runCmd's user choose the account
// a template's build commands run as; codecage's Dockerfile stages say it
// with USER, so buildah runs them as that account of the root (one its
// packages made: postgres, nobody...). A user the root lacks fails the
// build with E2B's words for it, before the command runs. E2B's "user",
// the unprivileged account of its images, is root here: codecage's roots
// have no such account. None of this reaches sandboxes: they run as their
// own unprivileged uid whatever the build used.

// userName is an account a build step may name: a passwd name or a uid.
var userName = regexp.MustCompile(`^(?:[a-z_][a-z0-9_.-]{0,31}|[0-9]{1,9})$`)

// buildUser is the account a step's user means to a build: "" for root.
func buildUser(u string) string {
	if u == "root" || u == "user" || u == "0" {
		return ""
	}
	return u
}

// run adds command cmd, run as the account as ("": root), to the open
// Dockerfile stage; the stage goes on as the template's current user.
func (p *planner) run(at, as, cmd string) error {
	line := "RUN " + jsonArray("/bin/sh", "-c", cmd)
	if as != p.user {
		failed := "failed to run command " + singleQuote(cmd) + ": command failed"
		line = userLines(as, failed) + line + "\n" + strings.TrimSuffix(userLines(p.user, ""), "\n")
	}
	return p.docker(at, line)
}

// userLines are the Dockerfile lines that make u ("": root) the user of
// the steps after them. For a name, and failed saying what fails (""
// when it was checked already), a check comes first that the root has
// that account, failing with E2B's reason.
func userLines(u, failed string) string {
	if u == "" {
		return "USER root\n"
	}
	check := ""
	if failed != "" && (u[0] < '0' || u[0] > '9') { // any uid runs; a name must be the root's
		// Shell builtins only: a root may have no id or grep. "Error: "
		// is how the build's failure reason picks the line up.
		msg := fmt.Sprintf("Error: %s: unauthenticated: invalid username: %s", failed, singleQuote(u))
		check = "RUN " + jsonArray("/bin/sh", "-c", "while IFS=: read -r n _ || [ -n \"$n\" ]; do [ \"$n\" = "+service.ShellQuote(u)+
			" ] && exit 0; done < /etc/passwd; printf '%s\\n' "+service.ShellQuote(msg)+" >&2; exit 1") + "\n"
	}
	return check + "USER " + u + "\n"
}
