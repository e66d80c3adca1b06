package scenarios_test

import (
	"fmt"
	"strconv"
	"strings"
)

// A step is one line of a scenario's -- request -- section: an operation
// and its arguments, name=value, the value bare or a Go string literal
// (which is how a scenario writes bytes that are not valid UTF-8:
// code="print('\xff')"). The operations, each run the way the surface
// under test does it:
//
//	session key=K [on=rest|mcp|e2b] [environment=E] [as=$t]
//	                                  opens a session as K (on the named surface,
//	                                  else the one under test; from environment E,
//	                                  on E2B the template E); later steps call it $s
//	                                  (or $t)
//	execute key=K code=C [session=S] [cancel=yes] [language=L] [environment=E] [context=$ctx]
//	                                  runs C (in the session's kernel of language L;
//	                                  E2B: in code context $ctx);
//	                                  cancel=yes drops the request once the run holds
//	                                  a slot, as a client that gives up; a stateless
//	                                  run in environment E (E2B: in the key's sandbox
//	                                  of template E, which E2B runs code in)
//	list key=K                        the sessions K sees
//	write key=K path=P content=C [session=S]
//	                                  writes C to P in the session's workspace
//	read key=K path=P [session=S]     reads P from it
//	command key=K cmd=C [session=S]   runs the command line C there (E2B: bash -l -c)
//	idle                              waits (a bound) until no run holds a slot and no
//	                                  sandbox exists beyond the open sessions'
//
// The steps of persistence (persist_test.go); a session= or from= value
// that starts with $ names an id an earlier step gave:
//
//	session key=K from=$snap [as=$t]  opens a session from a snapshot; later steps call
//	                                  it $t (default $s)
//	pause key=K [session=S] [keep_memory=no]
//	resume key=K [session=S]
//	snapshot key=K [name=N] [session=S]
//	                                  snapshots the session; later steps call it $snap
//	fork key=K count=N [session=S]    forks the session; the copies are $f1, $f2...
//
// E2B's alone (process_test.go, contexts_test.go), so a scenario of them
// names e2b in its -- surfaces --; the session is S, else $s, else the
// key's sandbox:
//
//	spawn key=K cmd=C [stdin=yes] [tag=T] [as=$q]
//	                                  starts C in the background (bash -l -c): the
//	                                  answer is its stream up to the start event;
//	                                  later steps call it $p (or $q)
//	connect key=K process=$p|tag=T [as=$d]
//	                                  follows a running process from now on: its
//	                                  stream up to the start event, later $c (or $d)
//	wait key=K stream=$p              the rest of an open stream, to its end
//	processes key=K                   the processes that run
//	input key=K process=$p|tag=T data=D
//	                                  writes D to the process's stdin
//	closestdin key=K process=$p|tag=T ends its stdin
//	signal key=K process=$p|tag=T [signal=SIGKILL|SIGTERM]
//	context key=K [language=L] [cwd=D] [as=$x]
//	                                  creates a code context; later steps call it $ctx
//	                                  (or $x)
//	contexts key=K                    lists the code contexts (the defaults named
//	                                  $python, $javascript...)
//	restartcontext key=K context=$ctx empties a context
//	removecontext key=K context=$ctx  removes one
type step struct {
	line string
	op   string
	args map[string]string
}

func parseSteps(text string) ([]step, error) {
	var steps []step
	for _, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		op, rest, _ := strings.Cut(line, " ")
		st := step{line: line, op: op, args: map[string]string{}}
		for rest = strings.TrimSpace(rest); rest != ""; rest = strings.TrimSpace(rest) {
			name, value, ok := strings.Cut(rest, "=")
			if !ok || name == "" || strings.ContainsAny(name, " \"") {
				return nil, fmt.Errorf("%q: want name=value at %q", line, rest)
			}
			if strings.HasPrefix(value, `"`) {
				q, err := strconv.QuotedPrefix(value)
				if err != nil {
					return nil, fmt.Errorf("%q: %v", line, err)
				}
				st.args[name], _ = strconv.Unquote(q)
				rest = value[len(q):]
			} else {
				v, after, _ := strings.Cut(value, " ")
				st.args[name], rest = v, after
			}
		}
		switch op {
		case "session", "execute", "list", "idle", "write", "read", "command", "pause", "resume", "snapshot", "fork", "logs", "network", "credential",
			"spawn", "connect", "wait", "processes", "input", "closestdin", "signal",
			"context", "contexts", "removecontext", "restartcontext":
		default:
			return nil, fmt.Errorf("%q: unknown operation %q", line, op)
		}
		steps = append(steps, st)
	}
	return steps, nil
}
