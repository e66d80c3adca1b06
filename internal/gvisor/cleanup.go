package gvisor

// cleanup is a stack of undo steps for a setup of several steps: each is
// added as its resource is acquired, and all run (last first) unless the
// setup succeeded and released them.
type cleanup struct{ steps []func() }

func (c *cleanup) add(f func()) { c.steps = append(c.steps, f) }

// run undoes every step still registered, last first.
func (c *cleanup) run() {
	for i := len(c.steps) - 1; i >= 0; i-- {
		c.steps[i]()
	}
	c.steps = nil
}

// release keeps what was set up: run does nothing afterwards.
func (c *cleanup) release() { c.steps = nil }
