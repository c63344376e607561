package worker

import "time"

// StopIdleLoops stops the dequeue loops after the first of each lane that
// has run nothing for linger, as the region watch does every RegionCheck
// with a minute's linger (servers.go).
func (w *Worker) StopIdleLoops(linger time.Duration) {
	if s := w.srvs.Load(); s != nil {
		s.stopIdleExtras(linger)
	}
}

// Batches is the dispatcher's grouping of a turn's hand-outs (batches).
var Batches = batches
