package archtest

import (
	"bufio"
	"bytes"
	"os/exec"
	"sort"
	"strings"
	"testing"
)

// The layers, top down. A request goes surface -> service -> fleet ->
// backends; a package imports only packages of its own layer or below, and
// only the fleet imports the backends (the jail, gVisor, the harness and
// the slot pools): everything above asks the fleet. Packages listed in
// shared are leaves of the graph (decisions, helpers, wire formats) that
// any layer may import and that import no layered package.
const (
	backend  = iota // jail, gvisor, runtime (the harness), pool
	fleet           // builds every sandbox from a description of the work
	session         // the session table: each session's state, locks, lifecycle, workspace, runs
	service         // the request service
	contract        // the wire contract the surfaces share: params, input checks, owner rule, status tables
	surface         // REST, MCP, E2B, the peer protocol, the CLI and its tools
	command         // the binary: re-exec init, then the CLI
)

var layers = map[string]int{
	"internal/jail":         backend,
	"internal/jail/seccomp": backend,
	"internal/gvisor":       backend,
	"internal/runtime":      backend,
	"internal/pool":         backend,
	"internal/fleet":        fleet,
	"internal/envbuild":     fleet, // runs the build tools (mmdebstrap, buildah) in their own jail
	"internal/session":      session,
	"internal/service":      service,
	"internal/leftovers":    service, // reads the fleet's uid facts from the host side, for tests and bench
	"internal/api":          contract,
	"internal/httpapi":      surface,
	"internal/mcpserver":    surface,
	"internal/e2b":          surface,
	"internal/cluster":      surface,
	"internal/metrics":      surface,
	"internal/bench":        surface,
	"internal/cli":          surface,
	"internal/server":       surface, // the composition root of serve and mcp: wires the service, the surfaces, audit, cluster
	"cmd/codecage":          command,
	"deploy/image":          command, // builds the container image; imports nothing of the module
}

var shared = []string{
	"internal/access", "internal/archtest", "internal/audit", "internal/bounded", "internal/config", "internal/dataset",
	"internal/egress", "internal/envfixture", "internal/envstore", "internal/fdpass", "internal/frontdoor", "internal/httpapi/docs", "internal/pgtest", "internal/snapstore",
	"internal/pipfixture", "internal/policy", "internal/probe", "internal/scenarios", "internal/streamwrite",
	"internal/upstream", "internal/wsfs",
}

// exceptions are the imports the rules would refuse, and why each is right.
var exceptions = map[[2]string]string{
	{"cmd/codecage", "internal/jail"}: "the re-exec init (jail.MaybeRunInit) must run before anything else, as runc's init does",
}

// TestLayering reads the import graph of the module's non-test code (what
// ships in the binary) and fails on every import across the layers. Test
// files may reach lower layers: the containment tests judge the sandboxes
// from the host with the jail's own facts, and every TestMain re-executes
// its binary as the sandbox init (jail.MaybeRunInit), as cmd/codecage does.
func TestLayering(t *testing.T) {
	graph := imports(t)
	isShared := map[string]bool{}
	for _, p := range shared {
		isShared[p] = true
	}
	var bad []string
	for _, from := range sortedKeys(graph) {
		fromLayer, layered := layers[from]
		if !layered && !isShared[from] {
			bad = append(bad, from+": not in the layer table: give it a layer or list it as shared")
			continue
		}
		for _, to := range graph[from] {
			toLayer, toLayered := layers[to]
			if _, ok := exceptions[[2]string{from, to}]; ok || (!toLayered && isShared[to]) {
				continue
			}
			switch {
			case !toLayered:
				bad = append(bad, from+" -> "+to+": not in the layer table")
			case !layered:
				bad = append(bad, from+" -> "+to+": a shared package imports a layered one")
			case toLayer > fromLayer:
				bad = append(bad, from+" -> "+to+": imports upward")
			case toLayer == backend && fromLayer > fleet:
				bad = append(bad, from+" -> "+to+": only the fleet uses the backends; ask the fleet")
			}
		}
	}
	if len(bad) > 0 {
		t.Errorf("%d imports across the layers:\n%s", len(bad), strings.Join(bad, "\n"))
	}
}

// imports maps each package of the module to the module's packages it
// imports in its non-test files, both as paths relative to the module.
func imports(t *testing.T) map[string][]string {
	t.Helper()
	out, err := exec.Command("go", "list", "-f", "{{.Module.Path}} {{.ImportPath}} {{join .Imports \" \"}}", "../../...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	graph := map[string][]string{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 2 {
			continue
		}
		module := f[0] + "/"
		from, ok := strings.CutPrefix(f[1], module)
		if !ok {
			continue
		}
		graph[from] = nil
		for _, imp := range f[2:] {
			if to, ok := strings.CutPrefix(imp, module); ok {
				graph[from] = append(graph[from], to)
			}
		}
	}
	if len(graph) < 10 {
		t.Fatalf("go list found %d packages; is the module there?\n%s", len(graph), out)
	}
	return graph
}

func sortedKeys(m map[string][]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
