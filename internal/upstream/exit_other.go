//go:build !linux

package upstream

// watchExit waits for the leader to exit (elsewhere than Linux, by
// reaping it: there is no waitid without reaping to lean on).
func (p *process) watchExit() {
	defer close(p.exited)
	_ = p.cmd.Wait()
}
