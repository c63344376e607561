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

// allowN takes n events (a batch) at once, all or none, from the token's
// limit and, on a tenant's routes, from the tenant's own (its setting); a
// batch larger than a burst could never pass and is refused as such (422).
// The tenant's limit is taken first: a refusal writes nothing
// (redis_rate), but a publish the token's limit refuses has spent its
// events of the tenant's, so the tenant may get fewer than its rate,
// never more.
func (il *ingestLimiter) allowN(ctx context.Context, r *http.Request, n int) error {
	keys := tasks.Keys(il.s.cfg.Namespace)
	tok, _ := presented(r)
	if sc, ok := scopeOf(r); ok {
		tok = "portal session " + sc.session // a portal's test events: its session's bucket
	}
	sum := sha256.Sum256([]byte(tok))
	token := ingestBucket{key: keys.IngestLimiterKey(hex.EncodeToString(sum[:8])), limit: il.limit,
		burst: "this token's ingest burst", burstHint: " (HOOKLANE_INGEST_BURST)", by: "with this token"}
	if n > token.limit.Burst { // a batch refused on its size writes nothing
		return token.tooBig(n)
	}
	if name, t := tenantSettings(r); t.IngestRate > 0 {
		tenant := ingestBucket{key: keys.TenantIngestLimiterKey(name),
			limit: redis_rate.Limit{Rate: t.IngestRate, Burst: cmp.Or(t.IngestBurst, t.IngestRate), Period: time.Second},
			burst: "tenant " + name + "'s ingest burst", by: "for tenant " + name}
		if n > tenant.limit.Burst {
			return tenant.tooBig(n)
		}
		if err := il.take(ctx, tenant, n); err != nil {
			return err
		}
	}
	return il.take(ctx, token, n)
}

// ingestBucket is one limit a publish is taken from, and how its refusals
// name it.
type ingestBucket struct {
	key              string
	limit            redis_rate.Limit
	burst, burstHint string // "this token's ingest burst", " (HOOKLANE_INGEST_BURST)"
	by               string // "with this token"
}

func (b ingestBucket) tooBig(n int) error {
	return apiErr(http.StatusUnprocessableEntity, "invalid", "events",
		"%d events are over %s of %d%s: send at most %d per call", n, b.burst, b.limit.Burst, b.burstHint, b.limit.Burst)
}

// take takes n events from b, or returns the 429 to answer (or a 503 when
// Redis does not answer).
func (il *ingestLimiter) take(ctx context.Context, b ingestBucket, n int) error {
	res, err := il.l.AllowN(ctx, b.key, b.limit, n)
	if err != nil {
		return fmt.Errorf("%w: %v", producer.ErrRedisUnavailable, err)
	}
	if res.Allowed > 0 {
		return nil
	}
	ae := apiErr(http.StatusTooManyRequests, "rate_limited", "",
		"more than %d events per second (burst %d) published %s; retry after %s",
		b.limit.Rate, b.limit.Burst, b.by, tasks.DurationWords(res.RetryAfter.Round(time.Millisecond)))
	ae.RetryAfter = res.RetryAfter
	return ae
}

// retryAfterSeconds is d as a Retry-After header value: whole seconds,
// rounded up, so that a client that waits it is never early; at least 1.
func retryAfterSeconds(d time.Duration) string {
	return fmt.Sprint(max(1, int64(math.Ceil(d.Seconds()))))
}
