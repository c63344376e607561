package web

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"math"
	"net/http"
	"time"

	"github.com/go-redis/redis_rate/v10"

	"github.com/hooklane/hooklane/producer"
	"github.com/hooklane/hooklane/tasks"
)

// ingestLimiter sheds publishes past a per-token rate (GCRA in Redis, so
// every web process shares it): a refused call is answered 429 with the
// Retry-After at which the next one is allowed, and writes nothing.
type ingestLimiter struct {
	l     *redis_rate.Limiter
	limit redis_rate.Limit
	s     *Server
}

func newIngestLimiter(s *Server) *ingestLimiter {
	return &ingestLimiter{l: redis_rate.NewLimiter(s.rdb), s: s,
		limit: redis_rate.Limit{Rate: s.cfg.IngestRate, Burst: s.cfg.IngestBurst, Period: time.Second}}
}

// allow takes one publish of the token r presents, or returns the 429 to
// answer (or a 503 when Redis does not answer).
func (il *ingestLimiter) allow(ctx context.Context, r *http.Request) error {
	return il.allowN(ctx, r, 1)
}

// allowN takes n events (a batch) at once, all or none; a batch larger
// than the burst could never pass and is refused as such (422).
func (il *ingestLimiter) allowN(ctx context.Context, r *http.Request, n int) error {
	if n > il.limit.Burst {
		return apiErr(http.StatusUnprocessableEntity, "invalid", "events",
			"%d events are over this token's ingest burst of %d (HOOKLANE_INGEST_BURST): send at most %d per call", n, il.limit.Burst, il.limit.Burst)
	}
	keys := tasks.Keys(il.s.cfg.Namespace)
	// The tenant's own limit first, then the token's: one refuses writing
	// nothing (redis_rate), but a publish the token's refuses has spent its
	// events of the tenant's, so the tenant may get fewer than its rate,
	// never more.
	if name, t := tenantSettings(r); t.IngestRate > 0 {
		limit := redis_rate.Limit{Rate: t.IngestRate, Burst: cmp.Or(t.IngestBurst, t.IngestRate), Period: time.Second}
		if n > limit.Burst {
			return apiErr(http.StatusUnprocessableEntity, "invalid", "events",
				"%d events are over tenant %s's ingest burst of %d: send at most %d per call", n, name, limit.Burst, limit.Burst)
		}
		res, err := il.l.AllowN(ctx, keys.TenantIngestLimiterKey(name), limit, n)
		if err != nil {
			return fmt.Errorf("%w: %v", producer.ErrRedisUnavailable, err)
		}
		if res.Allowed == 0 {
			ae := apiErr(http.StatusTooManyRequests, "rate_limited", "",
				"more than %d events per second (burst %d) published for tenant %s; retry after %s",
				limit.Rate, limit.Burst, name, tasks.DurationWords(res.RetryAfter.Round(time.Millisecond)))
			ae.RetryAfter = res.RetryAfter
			return ae
		}
	}
	tok, _ := presented(r)
	sum := sha256.Sum256([]byte(tok))
	key := keys.IngestLimiterKey(hex.EncodeToString(sum[:8]))
	res, err := il.l.AllowN(ctx, key, il.limit, n)
	if err != nil {
		return fmt.Errorf("%w: %v", producer.ErrRedisUnavailable, err)
	}
	if res.Allowed > 0 {
		return nil
	}
	ae := apiErr(http.StatusTooManyRequests, "rate_limited", "",
		"more than %d events per second (burst %d) published with this token; retry after %s",
		il.limit.Rate, il.limit.Burst, tasks.DurationWords(res.RetryAfter.Round(time.Millisecond)))
	ae.RetryAfter = res.RetryAfter
	return ae
}

// retryAfterSeconds is d as a Retry-After header value: whole seconds,
// rounded up, so that a client that waits it is never early; at least 1.
func retryAfterSeconds(d time.Duration) string {
	return fmt.Sprint(max(1, int64(math.Ceil(d.Seconds()))))
}
