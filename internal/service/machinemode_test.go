package service_test

import (
	"context"
	"os"
	"testing"

	"github.com/codecage/codecage/internal/service"
)

// machineRootVar, set to "root", runs every snippet that run() would
// execute as a stateless run as root inside a fresh machine session
// instead (python3 -c, a command of the machine as user: root): the
// containment rows must hold in that mode too, where the sandbox is a
// computer and its code is its root (scripts/test.sh's machine-root
// and gvisor-machine-root suites).
const machineRootVar = "CODECAGE_TEST_MACHINE"

func machineRootMode() bool { return os.Getenv(machineRootVar) == "root" }

// runAsMachineRoot is run() in that mode: a machine of the request's
// memory, the snippet as root, the command's result as a run's.
func runAsMachineRoot(t *testing.T, svc *service.Service, req service.Request) *service.Result {
	t.Helper()
	ctx := context.Background()
	se, err := svc.CreateSession(ctx, service.SessionRequest{Owner: "o", Machine: true, MemoryBytes: req.MemoryBytes, AllowedImports: req.AllowedImports})
	if err != nil {
		t.Fatalf("%s=root: a machine session: %v", machineRootVar, err)
	}
	defer svc.CloseSession(ctx, se.ID, "o")
	cres, err := svc.RunCommand(ctx, service.CommandRequest{SessionID: se.ID, Owner: "o", User: "root",
		Argv: []string{"python3", "-c", req.Code}, Timeout: req.Timeout})
	if err != nil {
		t.Fatalf("%s=root: the snippet as root: %v", machineRootVar, err)
	}
	res := &service.Result{Success: cres.Success, ExecutionID: cres.ExecutionID, Stdout: cres.Stdout, Stderr: cres.Stderr,
		ExitCode: cres.ExitCode, ExecutionTime: cres.ExecutionTime, TimedOut: cres.TimedOut, OOMKilled: cres.OOMKilled,
		Truncated: cres.Truncated, Limit: cres.Limit, Backend: cres.Backend, Isolation: cres.Isolation}
	switch {
	case cres.Signal != 0 && cres.Limit == nil:
		// As a run's: a crash names its signal.
		res.Error = &service.ErrorInfo{Type: "Crash", Message: *cres.Error}
	case !cres.Success && cres.Error != nil:
		res.Error = &service.ErrorInfo{Type: "CommandError", Message: *cres.Error}
	}
	return res
}
