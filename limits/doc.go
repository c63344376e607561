// Package limits holds hooklane's per-destination limits and the Redis-side
// gates that enforce them: the GCRA rate limit (github.com/go-redis/redis_rate),
// a destination cooldown set from Retry-After, a max-in-flight semaphore whose
// slots expire, and a pacing cursor that hands deferred work distinct wake-up
// slots so a backlog drains at the limit instead of waking all at once.
//
// It also parses Retry-After and defines DeferredError, the control error a
// worker returns to reschedule a task without spending an attempt.
package limits
