package wsfs

// Dropped is how many events the watch has dropped since the last Take,
// read without taking anything: a test waits for it instead of a time.
func (w *Watcher) Dropped() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.dropped
}
