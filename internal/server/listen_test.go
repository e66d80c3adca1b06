package server

import "testing"

func TestBindAddress(t *testing.T) {
	for _, c := range []struct {
		listen string
		keys   bool
		want   string
	}{
		{"127.0.0.1:8001", false, "127.0.0.1:8001"},
		{"[::1]:8001", false, "[::1]:8001"},
		{"localhost:9", false, "localhost:9"},
		{"0.0.0.0:8001", false, "127.0.0.1:8001"},
		{":8001", false, "127.0.0.1:8001"},
		{"10.1.2.3:80", false, "127.0.0.1:80"},
		{"0.0.0.0:8001", true, "0.0.0.0:8001"},
	} {
		got, err := bindAddress(c.listen, c.keys)
		if err != nil || got != c.want {
			t.Errorf("bindAddress(%q, %v) = %q, %v; want %q", c.listen, c.keys, got, err, c.want)
		}
	}
	if _, err := bindAddress("nonsense", false); err == nil {
		t.Error("bad address accepted")
	}
}
