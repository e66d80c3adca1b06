package policy

import (
	"errors"
	"slices"
	"testing"
	"time"
)

func TestImportList(t *testing.T) {
	if got := ImportList(nil); !slices.Contains(got, "math") || slices.Contains(got, "os") {
		t.Errorf("default list: %v", got)
	}
	if got := ImportList([]string{"*"}); got != nil {
		t.Errorf("* must switch the policy off, got %v", got)
	}
	if got := ImportList([]string{"numpy"}); !slices.Equal(got, []string{"numpy"}) {
		t.Errorf("explicit list: %v", got)
	}
}

func TestLimitChecks(t *testing.T) {
	var le *LimitError
	if err := CheckDuration("timeout", -time.Second, time.Minute); !errors.As(err, &le) || le.Name != "timeout" {
		t.Errorf("negative: %v", err)
	}
	if err := CheckDuration("timeout", time.Hour, time.Minute); err == nil {
		t.Error("over the bound must fail")
	}
	if err := CheckDuration("timeout", time.Second, time.Minute); err != nil {
		t.Error(err)
	}
	if err := CheckBytes("memory", 1, 16, 1024); err == nil {
		t.Error("under the minimum must fail")
	}
	if err := CheckBytes("memory", 0, 16, 1024); err != nil {
		t.Error("zero means default:", err)
	}
}
