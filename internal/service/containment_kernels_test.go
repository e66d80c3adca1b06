package service_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/codecage/codecage/internal/fleet"
	"github.com/codecage/codecage/internal/leftovers"
	"github.com/codecage/codecage/internal/service"
)

// TestContainment_46_KernelsAsContainedAsPython: node (the JavaScript
// kernel) and bash (the bash kernel) run in the session's jail as its
// Python does. Judged from the host: the kernel is a child of the
// session's harness, with the harness's host uid (a sandbox uid, not
// root), in the same cgroups, with no capabilities, no_new_privs and the
// seccomp filter, in a network namespace that is not the host's; and a
// host listener on loopback hears nothing from it.
//
// Under gVisor the kernels run in gVisor's own kernel: the host must see
// neither the node probe nor any node or bash of a sandbox uid, and the
// host listener hears nothing either.
func TestContainment_46_KernelsAsContainedAsPython(t *testing.T) {
	cfg := service.LeanTestConfig()
	cfg.Kernels = []string{"javascript", "bash"}
	svc := newServiceWith(t, cfg)
	ctx := context.Background()
	info, err := svc.CreateSession(ctx, service.SessionRequest{Owner: "o"})
	if err != nil {
		t.Fatal(err)
	}
	rec := newHostRecorder(t, "tcp", "127.0.0.1:0")
	port := rec.ln.Addr().String()
	port = port[strings.LastIndex(port, ":")+1:]
	token := randomToken(t)
	js := fmt.Sprintf(`
process.title = 'kernel-probe-%s'
const net = require('net')
await new Promise((resolve) => {
  const c = net.connect(%s, '127.0.0.1', () => { c.write('escaped'); resolve('connected') })
  c.on('error', (e) => resolve(e.code))
  setTimeout(() => resolve('timeout'), 2000)
})`, token, port)
	res, err := svc.Execute(ctx, service.Request{SessionID: info.ID, Owner: "o", Language: "js", Code: js, Display: true})
	if err != nil || res.Error != nil {
		t.Fatalf("probe: %v %+v", err, res)
	}
	t.Logf("node's connect to the host's loopback: %s", res.Display["text/plain"])
	rec.expectNoHits(t)
	if onGVisor() {
		if res, err := svc.Execute(ctx, service.Request{SessionID: info.ID, Owner: "o", Language: "bash", Code: "(echo escaped > /dev/tcp/127.0.0.1/" + port + ") 2>/dev/null; echo $?"}); err != nil || res.Stdout == "0\n" {
			t.Fatalf("bash probe: %v %+v", err, res)
		}
		rec.expectNoHits(t)
		for _, p := range leftovers.HostProcesses() {
			cmd, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", p.PID))
			if strings.Contains(string(cmd), "kernel-probe-"+token) || (leftovers.Leased(p.UID()) && (p.Name == "node" || p.Name == "bash")) {
				t.Errorf("a kernel runs on the host's kernel under gVisor: %+v %q", p, cmd)
			}
		}
		return
	}

	procs := leftovers.HostProcesses()
	byPID := map[int]leftovers.Process{}
	for _, p := range procs {
		byPID[p.PID] = p
	}
	var node *leftovers.Process
	for i, p := range procs {
		if cmd, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", p.PID)); strings.Contains(string(cmd), "kernel-probe-"+token) {
			node = &procs[i]
		}
	}
	if node == nil {
		t.Fatal("the host sees no node kernel process of the session")
	}
	harness, ok := byPID[node.PPID]
	if !ok || !strings.HasPrefix(harness.Name, "python") {
		t.Fatalf("the node kernel's parent is not the session's harness: %+v", harness)
	}
	for _, uid := range node.UIDs {
		if !fleet.InUIDSpan(uid) || uid != harness.UID() {
			t.Errorf("node runs as host uid %v, the harness as %d: not the session's sandbox uid", node.UIDs, harness.UID())
		}
	}
	if node.Status["CapEff"] != "0000000000000000" || node.Status["CapPrm"] != "0000000000000000" || node.Status["NoNewPrivs"] != "1" || node.Status["Seccomp"] != "2" {
		t.Errorf("node's privileges: CapEff %s CapPrm %s NoNewPrivs %s Seccomp %s", node.Status["CapEff"], node.Status["CapPrm"], node.Status["NoNewPrivs"], node.Status["Seccomp"])
	}
	nodeCg, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", node.PID))
	harnessCg, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", harness.PID))
	if len(nodeCg) == 0 || string(nodeCg) != string(harnessCg) || !strings.Contains(string(nodeCg), fmt.Sprintf("%d-", os.Getpid())) {
		t.Errorf("node's cgroups are not the session's:\nnode:    %s\nharness: %s", nodeCg, harnessCg)
	}
	hostNet, _ := os.Readlink("/proc/self/ns/net")
	nodeNet, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/net", node.PID))
	if err != nil || nodeNet == hostNet {
		t.Errorf("node's network namespace %q is the host's %q (%v)", nodeNet, hostNet, err)
	}

	// The bash kernel: the same checks on its process.
	if res, err := svc.Execute(ctx, service.Request{SessionID: info.ID, Owner: "o", Language: "bash", Code: "echo $$ > /tmp/bash-kernel-pid; (echo escaped > /dev/tcp/127.0.0.1/" + port + ") 2>/dev/null; echo $?"}); err != nil || res.Stdout == "0\n" {
		t.Fatalf("bash probe: %v %+v", err, res)
	}
	rec.expectNoHits(t)
	var bash *leftovers.Process
	for _, p := range leftovers.HostProcesses() {
		if p.Name == "bash" && p.PPID == harness.PID {
			bash = &p
		}
	}
	if bash == nil {
		t.Fatal("the host sees no bash kernel process of the session")
	}
	if bash.UID() != harness.UID() || bash.Status["CapEff"] != "0000000000000000" || bash.Status["Seccomp"] != "2" {
		t.Errorf("bash kernel: uid %d (harness %d), CapEff %s, Seccomp %s", bash.UID(), harness.UID(), bash.Status["CapEff"], bash.Status["Seccomp"])
	}
	if cg, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", bash.PID)); string(cg) != string(harnessCg) {
		t.Errorf("bash's cgroups are not the session's:\nbash:    %s\nharness: %s", cg, harnessCg)
	}
}
