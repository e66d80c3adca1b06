package e2b_test

import (
	"strings"
	"testing"

	"github.com/codecage/codecage/internal/config"
)

// A figure's chart reaches the SDK as the harness wrote it: its ticks and
// points keep their ".0" (E2B's Python SDK tests isinstance(t, float)), and
// a categorical axis (numpy.str_ values) still gives a chart.
func TestChartKeepsFloatsAndCategories(t *testing.T) {
	srv, _ := newServerWith(t, func(c *config.Config) { c.EnableDataScience = true })
	b := createBox(t, srv, `{"templateID": "data_science", "timeout": 60}`)
	status, out := b.run(`
import matplotlib.pyplot as plt
plt.figure()
plt.plot([1, 2, 3, 4, 5], ['A', 'B', 'C', 'D', 'E'])
plt.show()
`)
	if status != 200 || !strings.Contains(out, `"chart":{"type":"line"`) {
		t.Fatalf("no chart: %d %.600s", status, out)
	}
	for _, want := range []string{`"y_scale":"categorical"`, `"x_scale":"linear"`, `"y_ticks":[0.0,1.0,2.0,3.0,4.0]`, `"points":[[1.0,"A"],[2.0,"B"]`} {
		if !strings.Contains(out, want) {
			t.Errorf("want %s in %.1500s", want, out)
		}
	}
}
