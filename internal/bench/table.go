package bench

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
)

// WriteTable writes the report for a terminal: the machine, one row per
// case, the idle memory, HumanEval's and MBPP's failures, and the targets.
func (r *Report) WriteTable(w io.Writer) error {
	ew := &errWriter{w: w}
	r.writeSetup(ew)
	r.writeRows(ew)
	r.writeMemory(ew)
	r.writeEnvZygotes(ew)
	r.writeSuites(ew)
	r.writeTargets(ew)
	return ew.err
}

// writeSetup writes the machine, its isolation and the bench settings.
func (r *Report) writeSetup(ew io.Writer) {
	m := r.Machine
	fmt.Fprintf(ew, "codecage bench: %d cores", m.Cores)
	if m.CPU != "" {
		fmt.Fprintf(ew, " (%s)", m.CPU)
	}
	if m.MemTotalBytes > 0 {
		fmt.Fprintf(ew, ", %.1f GiB RAM", float64(m.MemTotalBytes)/(1<<30))
	}
	fmt.Fprintf(ew, ", Linux %s, Python %s (%s), %s\n", m.Kernel, m.Python, m.Interpreter, m.GoVersion)
	if m.Isolation != "" {
		fmt.Fprintf(ew, "isolation: %s\n", m.Isolation)
	}
	for _, warn := range m.Warnings {
		fmt.Fprintf(ew, "  warning: %s\n", warn)
	}
	s := r.Setup
	fmt.Fprintf(ew, "N=%d, %d clients, pools: basic %d, data_science %d, max %d sandboxes", s.N, s.Clients, s.PoolSize, s.DataPoolSize, s.MaxSandboxes)
	if s.Quick {
		fmt.Fprint(ew, " (quick)")
	}
	fmt.Fprintln(ew)
	fmt.Fprintln(ew)
}

// writeRows writes one line per measured case.
func (r *Report) writeRows(ew io.Writer) {
	caseW := len("case")
	for _, row := range r.Rows {
		caseW = max(caseW, len(row.Case))
	}
	fmt.Fprintf(ew, "%-*s %6s %7s %6s %8s %8s %8s %8s %8s %8s  %s\n", caseW, "case", "runs", "clients", "errors", "p50 ms", "p95 ms", "p99 ms", "runs/s", "sup ms", "faults", "notes")
	for _, row := range r.Rows {
		if row.Skipped != "" {
			fmt.Fprintf(ew, "%-*s %6s %7d %6s %8s %8s %8s %8s %8s %8s  %s\n", caseW, row.Case, "-", row.Clients, "-", "-", "-", "-", "-", "-", "-", row.Skipped)
			continue
		}
		faults := "-"
		if row.HostFaults > 0 {
			faults = fmt.Sprintf("%.0f", row.HostFaults)
		}
		tput := "-"
		if row.Throughput > 0 {
			tput = fmt.Sprintf("%.1f", row.Throughput)
		}
		sup := "-"
		if row.SupervisorCPU > 0 {
			sup = fmt.Sprintf("%.2f", row.SupervisorCPU)
		}
		fmt.Fprintf(ew, "%-*s %6d %7d %6d %8.2f %8.2f %8.2f %8s %8s %8s  %s\n",
			caseW, row.Case, row.Runs, row.Clients, row.Errors, row.P50, row.P95, row.P99, tput, sup, faults, rowNotes(row))
	}
	fmt.Fprintln(ew, "(sup ms: CPU time of the codecage process itself per run, all threads; the sandboxes' own CPU is not in it;")
	fmt.Fprintln(ew, " faults: the whole host's page faults per run, mostly pages a sandbox copied, ~15 us each on a PVM guest)")
}

// writeMemory writes the idle memory of a ready sandbox, per class.
func (r *Report) writeMemory(ew io.Writer) {
	if len(r.Memory) == 0 {
		return
	}
	fmt.Fprintln(ew)
	settled := ""
	if !r.MemorySettled {
		settled = " (still changing when measured)"
	}
	fmt.Fprintf(ew, "Idle memory per ready sandbox%s:\n", settled)
	tw := tabwriter.NewWriter(ew, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "class\tready\tfound\tprocesses\tPSS MiB\tRSS MiB\tcgroup MiB\t")
	for _, mc := range r.Memory {
		cg := "-"
		if mc.CgroupPerSandbox > 0 {
			cg = mib(mc.CgroupPerSandbox)
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%s\t%s\t%s\t\n", mc.Class, mc.Ready, mc.Sandboxes, mc.Processes, mib(mc.PSSPerSandbox), mib(mc.RSSPerSandbox), cg)
	}
	_ = tw.Flush()
	fmt.Fprintln(ew, "(sums over the class's processes, a zygote's included, divided by ready; PSS splits shared pages")
	fmt.Fprintln(ew, " among the processes mapping them; the cgroup figure includes page cache and tmpfs)")
}

// writeSuites writes HumanEval's and MBPP's results and failures, and the
// ratios to the baselines.
func (r *Report) writeSuites(ew io.Writer) {
	fmt.Fprintln(ew)
	for _, c := range []struct {
		name string
		s    Suite
	}{{"HumanEval", r.HumanEval}, {"MBPP", r.MBPP}} {
		if c.s.Skipped != "" {
			fmt.Fprintf(ew, "%s: not run: %s\n", c.name, c.s.Skipped)
			continue
		}
		fmt.Fprintf(ew, "%s: %d/%d passed, %.1f programs/s (%s)\n", c.name, c.s.Passed, c.s.Total, c.s.ProgramsPerSec, c.s.Path)
		for _, f := range c.s.Failures {
			fmt.Fprintf(ew, "  failed %s: %s: %s\n", f.TaskID, f.Type, f.Message)
		}
	}
	if r.Print1OverBare > 0 {
		fmt.Fprintf(ew, "print(1) p50 / bare python p50 = %.3f\n", r.Print1OverBare)
	}
	if s := r.gvisorSummary(); s != "" {
		fmt.Fprintln(ew, s)
	}
}

// writeTargets writes each target, met or not.
func (r *Report) writeTargets(ew io.Writer) {
	fmt.Fprintln(ew)
	fmt.Fprintln(ew, "Targets:")
	for _, t := range r.Targets {
		verdict := "met"
		if !t.Met {
			verdict = "NOT MET"
		}
		note := ""
		if t.Note != "" {
			note = " (" + t.Note + ")"
		}
		fmt.Fprintf(ew, "  %-8s %s: %s%s\n", verdict, t.Name, t.Measured, note)
	}
}

func rowNotes(row Row) string {
	var parts []string
	if row.Notes != "" {
		parts = append(parts, row.Notes)
	}
	if row.PoolHits+row.PoolMisses > 0 {
		parts = append(parts, fmt.Sprintf("pool hits %d/%d", row.PoolHits, row.PoolHits+row.PoolMisses))
	}
	if row.FirstError != "" {
		parts = append(parts, "first error: "+row.FirstError)
	}
	return strings.Join(parts, "; ")
}

func mib(n int64) string { return fmt.Sprintf("%.1f", float64(n)/(1<<20)) }

// errWriter keeps the first write error so the table code stays plain.
type errWriter struct {
	w   io.Writer
	err error
}

func (e *errWriter) Write(p []byte) (int, error) {
	if e.err != nil {
		return 0, e.err
	}
	n, err := e.w.Write(p)
	e.err = err
	return n, err
}
