package bench

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strconv"

	"github.com/codecage/codecage/internal/policy"
)

// zygotes finds this process's zygotes on the host: sandbox processes
// whose environment marks them (CODECAGE_ZYGOTE=1), with their memory.
// The cells a zygote forks inherit the mark. A cell's code has a marked
// parent (the cell's init); the cell's init is the first process of a
// pid namespace of its own, and may outlive the zygote that forked it
// (then its parent is the jail's init, not marked).
func zygotes() []ZygoteMemory {
	marked := map[int][]byte{}
	for _, p := range SandboxProcesses() {
		env, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(p.PID), "environ"))
		if err == nil && hasVar(env, "CODECAGE_ZYGOTE=1") {
			marked[p.PID] = env
		}
	}
	var out []ZygoteMemory
	for pid, env := range marked {
		dir := filepath.Join("/proc", strconv.Itoa(pid))
		status, err := os.ReadFile(filepath.Join(dir, "status"))
		if err != nil {
			continue
		}
		if _, cell := marked[statusInt(status, "PPid:")]; cell || namespaceInit(status) {
			continue
		}
		z := ZygoteMemory{PID: pid, Class: policy.Basic, Preload: varValue(env, "CODECAGE_PRELOAD")}
		if hasVar(env, "OMP_NUM_THREADS=1") { // runtime.DataScienceEnv's
			z.Class = policy.DataScience
		}
		z.RSS, z.PSS = memoryOf(dir)
		out = append(out, z)
	}
	slices.SortFunc(out, func(a, b ZygoteMemory) int { return a.PID - b.PID })
	return out
}

// newZygotes are the PIDs of the zygotes in after that were not in before.
func newZygotes(before, after []ZygoteMemory) []int {
	var out []int
	for _, z := range after {
		if !slices.ContainsFunc(before, func(o ZygoteMemory) bool { return o.PID == z.PID }) {
			out = append(out, z.PID)
		}
	}
	return out
}

// hasVar reports whether a NUL-separated environment holds kv exactly.
func hasVar(env []byte, kv string) bool {
	return slices.ContainsFunc(bytes.Split(env, []byte{0}), func(b []byte) bool { return string(b) == kv })
}

// varValue is the value of name in a NUL-separated environment, "" if unset.
func varValue(env []byte, name string) string {
	for _, kv := range bytes.Split(env, []byte{0}) {
		if v, ok := bytes.CutPrefix(kv, []byte(name+"=")); ok {
			return string(v)
		}
	}
	return ""
}

// namespaceInit reports whether a process is the first of its pid
// namespace: the last of its NSpid ids is 1.
func namespaceInit(status []byte) bool {
	for _, line := range bytes.Split(status, []byte{'\n'}) {
		if rest, ok := bytes.CutPrefix(line, []byte("NSpid:")); ok {
			ids := bytes.Fields(rest)
			return len(ids) > 1 && string(ids[len(ids)-1]) == "1"
		}
	}
	return false
}

// statusInt reads a "Key:\t123" line of /proc/<pid>/status, 0 if absent.
func statusInt(b []byte, key string) int {
	for _, line := range bytes.Split(b, []byte{'\n'}) {
		if rest, ok := bytes.CutPrefix(line, []byte(key)); ok {
			n, _ := strconv.Atoi(string(bytes.TrimSpace(rest)))
			return n
		}
	}
	return 0
}
