package cli

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"

	"github.com/codecage/codecage/internal/api"
	"github.com/codecage/codecage/internal/service"
)

// sessionsNetwork is PUT /sessions/{id}/network: the session's egress
// rules replaced by the flags' (none given: cleared).
func sessionsNetwork(c *clientCmd, args []string) int {
	var allow, deny multiFlag
	c.fs.Var(&allow, "allow-out", "a destination let through: a name, *.suffix, an address or a CIDR block (repeatable)")
	c.fs.Var(&deny, "deny-out", "an address or CIDR block refused unless --allow-out lets it through; 0.0.0.0/0: all (repeatable)")
	if status, ok := c.parse(args, 1, 1, "session id"); !ok {
		return status
	}
	data, status, ok := c.call(http.MethodPut, "/sessions/"+idPath(c.args[0])+"/network", nil,
		api.NetworkParams{AllowOut: allow, DenyOut: deny})
	if !ok {
		return status
	}
	if c.json {
		c.printJSON(data)
		return exitOK
	}
	var out struct {
		Network service.NetworkRules `json:"network"`
	}
	if err := json.Unmarshal(data, &out); err != nil {
		fmt.Fprintf(c.stderr, "codecage %s: the server's answer is not a session's rules: %v\n", c.name, err)
		return exitInternal
	}
	if out.Network.IsZero() {
		fmt.Fprintln(c.stdout, "no rules: the operator's allow list alone")
		return exitOK
	}
	fmt.Fprintf(c.stdout, "allow_out: %s\ndeny_out: %s\n", strings.Join(out.Network.AllowOut, " "), strings.Join(out.Network.DenyOut, " "))
	return exitOK
}
