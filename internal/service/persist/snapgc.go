package persist

import (
	"context"
	"time"
)

// snapshotGCEvery is how often the service collects the snapshot store:
// expired snapshots and parked sessions (SANDBOX_SNAPSHOT_TTL), and the
// leftovers of interrupted writes. Every replica of a cluster does it; the
// store's sweep is safe to run from several at once.
const snapshotGCEvery = time.Hour

// CollectSnapshots collects the store once soon after the start, then
// every snapshotGCEvery, until stop is closed. A store never made (a
// directory store no one used) is left alone.
func (p *Persist) CollectSnapshots(stop <-chan struct{}) {
	wait := time.NewTimer(time.Minute)
	defer wait.Stop()
	for {
		select {
		case <-stop:
			return
		case <-wait.C:
		}
		p.CollectOnce()
		wait.Reset(snapshotGCEvery)
	}
}

func (p *Persist) CollectOnce() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	st, err := p.parkedStore(ctx)
	if st == nil || err != nil {
		if err != nil {
			p.log().Warn("snapshot store: not collected", "err", err)
		}
		return
	}
	stats, err := st.GC(ctx)
	if err != nil {
		p.log().Warn("snapshot store: collection failed", "err", err)
		return
	}
	if stats.Expired+stats.Orphans+stats.Unverified > 0 {
		p.log().Info("snapshot store collected", "expired", stats.Expired, "leftovers", stats.Orphans, "unverified_kept", stats.Unverified)
	}
}
