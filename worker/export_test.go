package worker

import (
	"time"

	"github.com/redis/go-redis/v9"
)

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

// BacklogClient is the client the backlog lane's Servers, the dispatchers
// and the gates outside the fresh lane share (Worker.ap).
func (w *Worker) BacklogClient() redis.UniversalClient { return w.ap }
