package fleet

import (
	"bytes"
	"reflect"
	"testing"
	"time"

	"github.com/codecage/codecage/internal/jail"
	"github.com/codecage/codecage/internal/runtime"
)

// TestWorkSpec holds each kind of work to the spec its caller built by
// hand before the fleet built them all: the same argv, environment (and
// its order), mounts, identity and limits.
func TestWorkSpec(t *testing.T) {
	const py = "/usr/bin/python3"
	layer := []Bind{{Host: "/srv/layer", Path: runtime.PackagesDir}}
	lim := Limits{Timeout: time.Second, CPUTime: 2 * time.Second, MemoryBytes: 64 << 20}
	fwd := &Forward{Port: 3128}
	proxy := []string{"HTTP_PROXY=http://127.0.0.1:3128", "HTTPS_PROXY=http://127.0.0.1:3128", "http_proxy=http://127.0.0.1:3128", "https_proxy=http://127.0.0.1:3128", "NO_PROXY=", "no_proxy="}
	var out bytes.Buffer
	dsEnv, dsBinds := runtime.DataScienceEnv(runtime.Env())
	sessEnv := sessionEnv(runtime.Env(), "/home/me", map[string]string{"A": "1"})
	sessDSEnv, _ := runtime.DataScienceEnv(sessEnv)
	cases := []struct {
		name string
		work Work
		want jail.Spec
	}{
		{"pooled basic", Work{Kind: Pooled, Interpreter: py, Layer: layer, Limits: lim},
			jail.Spec{Argv: runtime.Argv(py), Env: runtime.Env(), Binds: layer, Limits: lim}},
		{"pooled data science", Work{Kind: Pooled, Interpreter: py, Limits: lim, DataScience: true, Preload: true},
			jail.Spec{Argv: runtime.Argv(py), Env: append(dsEnv, "CODECAGE_PRELOAD=numpy,pandas"), ReadOnlyBinds: dsBinds, Limits: lim}},
		{"run with network", Work{Kind: Run, ID: "r1", Interpreter: py, Layer: layer, Limits: lim, DataScience: true, Forward: fwd},
			jail.Spec{ID: "r1", Argv: runtime.Argv(py), Env: append(append([]string{}, dsEnv...), proxy...), ReadOnlyBinds: dsBinds, Binds: layer, Limits: lim, Forward: fwd}},
		{"session", Work{Kind: Session, ID: "s1", Interpreter: py, Workspace: "/ws", Site: "/site", Layer: layer, HostUID: 7,
			Home: "/home/me", Vars: map[string]string{"A": "1"}, Limits: lim, Lifetime: time.Hour, DataScience: true, Forward: fwd},
			jail.Spec{ID: "s1", Argv: runtime.Argv(py), Env: append(sessDSEnv, proxy...), ReadOnlyBinds: dsBinds, Workspace: "/ws", HostUID: 7, Home: "/home/me",
				Binds: append([]Bind{{Host: "/site", Path: runtime.SiteDir}}, layer...), Forward: fwd,
				Limits: Limits{Timeout: time.Hour, CPUTime: time.Hour, MemoryBytes: 64 << 20}}},
		{"command", Work{Kind: Command, ID: "c1", Argv: []string{"/bin/sh"}, Env: []string{"PATH=/bin"}, Home: "/workspace", Workspace: "/ws", HostUID: 7,
			Limits: lim, Stdout: &out, Stderr: &out},
			jail.Spec{ID: "c1", Argv: []string{"/bin/sh"}, Env: []string{"PATH=/bin"}, Home: "/workspace", Workspace: "/ws", HostUID: 7, Limits: lim, Stdout: &out, Stderr: &out, NoChannel: true}},
		{"pip", Work{Kind: Pip, ID: "p1", Interpreter: py, Argv: []string{"-m", "pip"}, Workspace: "/site", HostUID: 7, Limits: lim, Forward: fwd, Stdout: &out, Stderr: &out},
			jail.Spec{ID: "p1", Argv: []string{py, "-m", "pip"}, Env: append([]string{"PATH=/usr/bin:/bin", "HOME=/tmp", "LANG=C.UTF-8", "TMPDIR=/tmp", "PIP_NO_INPUT=1"}, proxy...),
				Workspace: "/site", HostUID: 7, Limits: lim, Forward: fwd, Stdout: &out, Stderr: &out, NoChannel: true}},
		{"pooled from an environment", Work{Kind: Pooled, Interpreter: "/usr/local/bin/python3", Root: "/envs/roots/r1", EnvLayer: "/envs/layers/l1",
			Layer: layer, Vars: map[string]string{"LANG": "C", "A": "1"}, Preimport: []string{"numpy", "polars"}, Preload: true, Limits: lim},
			jail.Spec{Argv: runtime.Argv("/usr/local/bin/python3"), Root: "/envs/roots/r1", Limits: lim,
				Env:   append(withVars(runtime.Env(), map[string]string{"LANG": "C", "A": "1"}), "CODECAGE_PRELOAD=numpy,pandas,polars"),
				Binds: append([]Bind{{Host: "/envs/layers/l1", Path: runtime.EnvDir}}, layer...)}},
		{"session from an environment", Work{Kind: Session, ID: "s2", Interpreter: py, Root: "/envs/roots/r1", EnvLayer: "/envs/layers/l1",
			Workspace: "/ws", Site: "/site", Layer: layer, Limits: lim, Lifetime: time.Hour},
			jail.Spec{ID: "s2", Argv: runtime.Argv(py), Env: runtime.Env(), Root: "/envs/roots/r1", Workspace: "/ws",
				Binds:  append([]Bind{{Host: "/site", Path: runtime.SiteDir}, {Host: "/envs/layers/l1", Path: runtime.EnvDir}}, layer...),
				Limits: Limits{Timeout: time.Hour, CPUTime: time.Hour, MemoryBytes: 64 << 20}, LoopbackServers: true}},
		{"command from an environment", Work{Kind: Command, ID: "c2", Argv: []string{"/bin/sh"}, Env: []string{"PATH=/bin"}, Root: "/envs/roots/r1", Limits: lim},
			jail.Spec{ID: "c2", Argv: []string{"/bin/sh"}, Env: []string{"PATH=/bin"}, Root: "/envs/roots/r1", Limits: lim, NoChannel: true}},
		{"pip ignores the environment", Work{Kind: Pip, ID: "p2", Interpreter: py, Argv: []string{"-m", "pip"}, Root: "/envs/roots/r1", EnvLayer: "/l", Limits: lim},
			jail.Spec{ID: "p2", Argv: []string{py, "-m", "pip"}, Env: []string{"PATH=/usr/bin:/bin", "HOME=/tmp", "LANG=C.UTF-8", "TMPDIR=/tmp", "PIP_NO_INPUT=1"}, Limits: lim, NoChannel: true}},
		{"validate", Work{Kind: Validate, Interpreter: py, Limits: lim},
			jail.Spec{Argv: runtime.ValidatorArgv(py), Env: runtime.Env(), Limits: lim}},
	}
	for _, c := range cases {
		got := c.work.Spec()
		if !reflect.DeepEqual(got.Argv, c.want.Argv) {
			t.Errorf("%s: argv differs", c.name)
		}
		got.Argv, c.want.Argv = nil, nil // the harness's source: too long to print
		if !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s:\n got  %+v\n want %+v", c.name, got, c.want)
		}
	}
}

// TestCapsLimits holds each kind's limits to what its caller computed.
func TestCapsLimits(t *testing.T) {
	c := Caps{CPUCores: 0.5, Memory: 128 << 20, Output: 1000, MaxProcesses: 32, FileSize: 5 << 20, OpenFiles: 64, Tmp: 9 << 20, Workspace: 20 << 20}
	shared := Limits{CPUCores: 0.5, MaxProcesses: 32, FileSizeBytes: 5 << 20, OpenFiles: 64, TmpBytes: 9 << 20, WorkspaceBytes: 20 << 20}
	with := func(f func(*Limits)) Limits { l := shared; f(&l); return l }
	cases := []struct {
		name      string
		got, want Limits
	}{
		{"run", c.Run(Need{Timeout: time.Second, CPUTime: 2 * time.Second, Memory: 1 << 30, Output: 7}),
			with(func(l *Limits) {
				l.Timeout, l.CPUTime, l.MemoryBytes, l.OutputBytes = time.Second, 2*time.Second, 1<<30, 7
			})},
		{"pooled", c.Pooled(time.Minute, 3*time.Second, 256<<20),
			with(func(l *Limits) {
				l.Timeout, l.CPUTime, l.MemoryBytes, l.OutputBytes = time.Minute, 3*time.Second, 256<<20, 1000
			})},
		{"command", c.Command(4 * time.Second),
			with(func(l *Limits) {
				l.Timeout, l.CPUTime, l.MemoryBytes, l.OutputBytes = 4*time.Second, 4*time.Second, 128<<20, 1000
			})},
		{"pip", c.Pip(time.Minute, 50<<20, 80<<20),
			Limits{Timeout: time.Minute, CPUTime: time.Minute, CPUCores: 0.5, MemoryBytes: 512 << 20, OutputBytes: 1 << 20, MaxProcesses: 32,
				FileSizeBytes: 80 << 20, OpenFiles: 64, TmpBytes: 50 << 20, WorkspaceBytes: 80 << 20}},
		{"validate", c.Validate(), Limits{Timeout: 15 * time.Second, CPUTime: 15 * time.Second, MemoryBytes: 512 << 20, CPUCores: 0.5}},
	}
	for _, tc := range cases {
		if tc.got != tc.want {
			t.Errorf("%s:\n got  %+v\n want %+v", tc.name, tc.got, tc.want)
		}
	}
}
