package bench

import (
	"fmt"
)

// targets judges the run against the project's goals.
func (b *bencher) targets() []Target {
	r := b.rep
	var out []Target

	seq, bare := r.Row("print1_sequential"), r.Row("bare_python_sequential")
	t := Target{Name: "print(1) p50 <= 1/4 of bare python p50"}
	if seq != nil && bare != nil && bare.P50 > 0 && seq.Runs > 0 {
		r.Print1OverBare = round3(seq.P50 / bare.P50)
		t.Measured = fmt.Sprintf("%.2f ms vs %.2f ms (ratio %.3f)", seq.P50, bare.P50, r.Print1OverBare)
		t.Met = seq.Errors == 0 && seq.P50*4 <= bare.P50
		if w := r.Row("print1_warm"); w != nil && w.Runs > 0 {
			t.Note = fmt.Sprintf("%.2f ms when the pool is full before each run", w.P50)
		}
	} else {
		t.Measured = "not measured"
	}
	out = append(out, t)

	conc := r.Row("print1_concurrent")
	t = Target{Name: ">= 300 print(1) runs/s with 8 clients"}
	if conc != nil && conc.Runs > 0 {
		t.Measured = fmt.Sprintf("%.0f runs/s with %d clients", conc.Throughput, conc.Clients)
		t.Met = conc.Errors == 0 && conc.Throughput >= 300 && conc.Clients >= 8
		if conc.Clients != 8 {
			t.Note = fmt.Sprintf("measured with %d clients, not 8", conc.Clients)
		}
	} else {
		t.Measured = "not measured"
	}
	out = append(out, t)

	np := r.Row("numpy_sequential")
	t = Target{Name: "numpy p50 < 10 ms"}
	if np != nil && np.Runs > 0 {
		t.Measured = fmt.Sprintf("%.2f ms", np.P50)
		t.Met = np.Errors == 0 && np.P50 < 10
		if w := r.Row("numpy_warm"); w != nil && w.Runs > 0 {
			t.Note = fmt.Sprintf("%.2f ms when the pool is full before each run", w.P50)
		}
	} else {
		t.Measured = "not measured"
	}
	out = append(out, t)

	out = append(out, suiteTarget("HumanEval 164/164", r.HumanEval, 164), suiteTarget("MBPP 974/974", r.MBPP, 974))
	out = append(out, r.envTarget())
	return out
}

// suiteTarget: every problem of the set passes under the defaults.
func suiteTarget(name string, s Suite, size int) Target {
	t := Target{Name: name}
	if s.Skipped != "" {
		t.Measured = "not run: " + s.Skipped
		return t
	}
	t.Measured = fmt.Sprintf("%d/%d passed", s.Passed, s.Total)
	t.Met = s.Total > 0 && s.Passed == s.Total && s.Total >= size
	if s.Total < s.InFile {
		t.Note = fmt.Sprintf("only the first %d of %d problems ran", s.Total, s.InFile)
	}
	return t
}

func round3(f float64) float64 {
	return float64(int64(f*1000+0.5)) / 1000
}
