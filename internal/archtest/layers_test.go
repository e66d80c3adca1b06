package archtest

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"slices"
	"sort"
	"strings"
	"testing"
)

// The layers, top down. A request goes surface -> service -> fleet ->
// backends; a package imports only packages of its own layer or below, and
// only the package internal/fleet imports the backends (the jail, gVisor,
// the harness and the slot pools; see gateways): everything else asks the
// fleet. Packages listed in shared are leaves of the graph (decisions,
// helpers, wire formats) that any layer may import and that import no
// layered package.
const (
	backend  = iota // jail, gvisor, runtime (the harness), pool
	fleet           // builds every sandbox from a description of the work
	session         // the session table: each session's state, locks, lifecycle, workspace, runs
	domain          // the service's domains (internal/service/<domain>) and the leaves they share
	service         // the request service: the envelope over the domains
	contract        // the wire contract the surfaces share: params, input checks, owner rule, status tables
	surface         // REST, MCP, E2B, the peer protocol, the CLI and its tools
	command         // the binary: re-exec init, then the CLI
)

var layers = map[string]int{
	"internal/jail":             backend,
	"internal/jail/seccomp":     backend,
	"internal/gvisor":           backend,
	"internal/runtime":          backend,
	"internal/pool":             backend,
	"internal/fleet":            fleet,
	"internal/envbuild":         fleet, // runs the build tools (mmdebstrap, buildah) in namespaces of their own, not the jail
	"internal/session":          session,
	"internal/service":          service,
	"internal/service/errdefs":  domain,  // a leaf of the domains: the sentinels, kinds and their classification
	"internal/service/event":    domain,  // a leaf of the domains: events, observers, the caller
	"internal/service/report":   domain,  // a leaf of the domains: an execution's result, what a run used, its output sink and dropped output
	"internal/service/sizing":   domain,  // a leaf of the domains: the operator's configuration in the fleet's terms (caps, pools, a run's limits)
	"internal/service/check":    domain,  // a leaf of the domains: the shape checks of requests (code, contexts, sessions, lifetimes, environment variables)
	"internal/service/files":    domain,  // the file API over sessions: reads, writes, transfers, uploads, watches, the file view
	"internal/service/info":     service, // what the server offers (get_sandbox_info): reads the packages domain's layer, so it sits beside the root
	"internal/leftovers":        service, // reads the fleet's uid facts from the host side, for tests and bench
	"internal/api":              contract,
	"internal/httpapi":          surface,
	"internal/mcpserver":        surface,
	"internal/e2b":              surface,
	"internal/e2b/wire":         surface, // the E2B protocol's messages (envd's and the control plane's), types only
	"internal/e2b/templateplan": surface, // E2B template steps translated into environment builds: pure, no HTTP, no service calls
	"internal/cluster":          surface,
	"internal/metrics":          surface,
	"internal/bench":            surface,
	"internal/cli":              surface,
	"internal/server":           surface, // the composition root of serve and mcp: wires the service, the surfaces, audit, cluster
	"cmd/codecage":              command,
	"deploy/image":              command, // builds the container image; imports nothing of the module

	// The service's domains, each apart from the others (TestDomainsImportNoOtherDomain).
	"internal/service/codemode": domain, // code mode: a run's upstream tools, their specs for the harness, its tool calls
	"internal/service/commands": domain, // run_command, a session's daemon, a command's input
	"internal/service/envs":     domain, // environments: builds, records, their uses, a session's seed and start commands
	"internal/service/gateway":  domain, // E2B's MCP gateway: a sandbox's servers, started outside it with its creator's values, and their endpoint
	"internal/service/packages": domain, // pip_install, the operator's package layer, pip in its jail
	"internal/service/persist":  domain, // pauses, snapshots, forks, parked sessions and the snapshot store
	"internal/service/secrets":  domain, // secrets that never enter a sandbox: the owners' vault, a sandbox's own, each proxy's trust store
}

var shared = []string{
	"internal/access", "internal/archtest", "internal/audit", "internal/bounded", "internal/config", "internal/dataset",
	"internal/debfixture", "internal/egress", "internal/envfixture", "internal/envstore", "internal/fdpass", "internal/frontdoor", "internal/hostproc", "internal/httpapi/docs", "internal/loopback", "internal/pgtest", "internal/snapstore", "internal/tlsfixture", "internal/vault",
	"internal/pipfixture", "internal/policy", "internal/probe", "internal/reexec", "internal/scenarios", "internal/streamwrite",
	"internal/upstream", "internal/wsfs",
}

// gateways name, for a layer, the one package above it that may import
// it: every other package of a higher layer must go through that one. The
// rule is by package, not by layer, so that a package placed beside the
// gateway (envbuild sits in the fleet's layer) does not inherit its right.
var gateways = map[int]string{
	backend: "internal/fleet",
}

// platforms are the targets whose import graphs are checked: a file for
// one system only (foo_linux.go, a !linux stub) is part of the graph only
// when listed for its system.
var platforms = [][2]string{{"linux", "amd64"}, {"linux", "arm64"}, {"darwin", "arm64"}, {"windows", "amd64"}}

// exceptions are the imports the rules would refuse, and why each is right.
var exceptions = map[[2]string]string{
	{"cmd/codecage", "internal/jail"}: "the re-exec init (jail.MaybeRunInit) must run before anything else, as runc's init does",
}

// domainLeaves are the service's packages every domain may import; a
// domain imports no other domain, except for the pairs in domainUses, so
// that domains meet only in the root above them and the stores below.
var domainLeaves = []string{"internal/service/check", "internal/service/errdefs", "internal/service/event", "internal/service/report", "internal/service/sizing"}

// domainUses are the imports of one domain by another, and why each is
// right.
var domainUses = map[[2]string]string{
	// A saved session comes back on its environment's content, counted as
	// a use of it so the collector keeps its root (envpersist.go).
	{"internal/service/persist", "internal/service/envs"}: "a copy, a fork or a parked session starts in the environment it was saved in",
}

// TestDomainsImportNoOtherDomain fails on a domain of the service that
// imports another (containerd's plugins/services/<domain> meet in shared
// stores, never in each other).
func TestDomainsImportNoOtherDomain(t *testing.T) {
	graph := imports(t)
	var bad []string
	for _, from := range sortedKeys(graph) {
		if layers[from] != domain {
			continue
		}
		for _, to := range graph[from] {
			if layers[to] != domain || slices.Contains(domainLeaves, to) {
				continue
			}
			if _, ok := domainUses[[2]string{from, to}]; !ok {
				bad = append(bad, from+" -> "+to)
			}
		}
	}
	if slices.ContainsFunc(domainLeaves, func(leaf string) bool {
		// A leaf may build on another leaf (check refuses with errdefs'
		// sentinels), never on a domain.
		return slices.ContainsFunc(graph[leaf], func(to string) bool { return layers[to] == domain && !slices.Contains(domainLeaves, to) })
	}) {
		bad = append(bad, "a domain leaf imports a domain")
	}
	if len(bad) > 0 {
		t.Errorf("domains of the service that import one another:\n%s", strings.Join(bad, "\n"))
	}
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
			case toLayer < fromLayer && gateways[toLayer] != "" && from != gateways[toLayer]:
				bad = append(bad, from+" -> "+to+": only "+gateways[toLayer]+" imports that layer; ask it")
			}
		}
	}
	if len(bad) > 0 {
		t.Errorf("%d imports across the layers:\n%s", len(bad), strings.Join(bad, "\n"))
	}
}

// imports maps each package of the module to the module's packages it
// imports in its non-test files on any of the platforms, both as paths
// relative to the module.
func imports(t *testing.T) map[string][]string {
	t.Helper()
	graph := map[string][]string{}
	for _, p := range platforms {
		add(t, graph, p[0], p[1])
	}
	for from, to := range graph {
		sort.Strings(to)
		graph[from] = slices.Compact(to)
	}
	return graph
}

// add puts the import graph go list gives for goos/goarch into graph.
func add(t *testing.T, graph map[string][]string, goos, goarch string) {
	t.Helper()
	cmd := exec.Command("go", "list", "-f", "{{.Module.Path}} {{.ImportPath}} {{join .Imports \" \"}}", "../../...")
	cmd.Env = append(os.Environ(), "GOOS="+goos, "GOARCH="+goarch)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list for %s/%s: %v", goos, goarch, err)
	}
	n := 0
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
		n++
		if _, ok := graph[from]; !ok {
			graph[from] = nil
		}
		for _, imp := range f[2:] {
			if to, ok := strings.CutPrefix(imp, module); ok {
				graph[from] = append(graph[from], to)
			}
		}
	}
	if n < 10 {
		t.Fatalf("go list for %s/%s found %d packages; is the module there?\n%s", goos, goarch, n, out)
	}
}

func sortedKeys(m map[string][]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
