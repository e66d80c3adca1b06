package service

import "github.com/codecage/codecage/internal/config"

// LeanTestConfig is the default configuration with only the warm pools a
// test of one run needs: one ready sandbox of the basic class, and no
// data-science, session or machine spares. Those start with every service: a
// data-science sandbox imports numpy and pandas before any request, and
// under gVisor each spare is a boot of its own, so a test that runs
// print(1) paid for four sandboxes it never used (about 3 s of CPU per
// test under gVisor). Tests of the pools and spares set their own sizes;
// allProfilesService keeps the defaults, so the preloaded data-science
// path is still what the numpy and plot tests run on.
func LeanTestConfig() config.Config {
	cfg := config.DefaultConfig()
	cfg.PoolSize, cfg.DataPoolSize, cfg.SessionPoolSize, cfg.MachinePoolSize = 1, 0, 0, 0
	cfg.GVisorPoolSize, cfg.GVisorDataPoolSize, cfg.GVisorSessionPoolSize = 1, 0, 0
	return cfg
}
