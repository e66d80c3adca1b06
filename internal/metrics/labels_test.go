package metrics

import "testing"

// Labels stay bounded whatever a client sends.
func TestLabels(t *testing.T) {
	for in, want := range map[string]string{
		"": "default", "basic": "basic", "data_science, basic": "basic+data_science",
		"basic+network": "basic+network", "nosuch": "default", "basic,basic": "basic",
		"filesystem,evil\x00label": "filesystem",
	} {
		if got := profileLabel(in); got != want {
			t.Errorf("profileLabel(%q) = %q, want %q", in, got, want)
		}
	}
	for in, want := range map[int]string{200: "200", 404: "404", 499: "499", 0: "other", 1000: "other"} {
		if got := statusLabel(in); got != want {
			t.Errorf("statusLabel(%d) = %q, want %q", in, got, want)
		}
	}
	for in, want := range map[string]string{"success": "success", "busy": "busy", "timeout": "error", "whatever": "error"} {
		if got := outcomeLabel(in); got != want {
			t.Errorf("outcomeLabel(%q) = %q, want %q", in, got, want)
		}
	}
}
