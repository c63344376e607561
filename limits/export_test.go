package limits

import (
	"context"

	"github.com/redis/go-redis/v9"
)

// QueuedCalls is how many calls wait for the batch on its way.
func QueuedCalls(g *Gates) int {
	g.comb.mu.Lock()
	defer g.comb.mu.Unlock()
	return len(g.comb.queue)
}

// RunBatched runs script through g's combiner, as Admit and Take do.
func RunBatched(ctx context.Context, g *Gates, script *redis.Script, keys []string, args ...any) ([]any, error) {
	return g.comb.run(ctx, script, keys, args...)
}
