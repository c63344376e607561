package producer

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hooklane/hooklane/tasks"
)

// The portal: a link the operator (or a tenant token with manage) makes
// for one tenant, which opens the console scoped to that tenant. A link
// is usable once and lives at most MaxPortalLife; opening it starts a
// session (a cookie's secret) that ends when the link would have. Both
// are kept in Redis by their secret's SHA-256 only, so every web process
// knows them and a Redis dump holds no usable secret, and both end by
// their keys' TTL: Redis' clock alone.

// MaxPortalLife is the longest a portal link, and the session it opens,
// lives.
const MaxPortalLife = time.Hour

// Prefixes of the portal's secrets, told apart from tokens at a glance.
const (
	PortalLinkPrefix    = "hlp_"
	PortalSessionPrefix = "hls_"
)

// ErrUnknownPortal: no live portal link (or session) has that secret:
// never made, already used, expired, or its tenant deleted.
var ErrUnknownPortal = errors.New("unknown or used portal link")

// PortalGrant is what a portal link or session grants: one tenant's
// console until Expires.
type PortalGrant struct {
	Tenant  string
	Expires time.Time
}

// CreatePortalLink makes a portal link's secret for registered tenant,
// live for life (0 or more than MaxPortalLife: MaxPortalLife).
func (p *Producer) CreatePortalLink(ctx context.Context, tenant string, life time.Duration) (string, PortalGrant, error) {
	if life <= 0 || life > MaxPortalLife {
		life = MaxPortalLife
	}
	if _, err := p.GetTenant(ctx, tenant); err != nil {
		return "", PortalGrant{}, err
	}
	g := PortalGrant{Tenant: tenant, Expires: p.nowFunc().Add(life).UTC().Truncate(time.Millisecond)}
	secret := PortalLinkPrefix + randomSecret()
	if err := p.rdb.Set(ctx, p.keys.PortalLink(tokenDigest(secret)), g.encode(), life).Err(); err != nil {
		return "", PortalGrant{}, fmt.Errorf("%w: %v", ErrRedisUnavailable, err)
	}
	return secret, g, nil
}

// RedeemPortalLink uses link (once: a second call answers
// ErrUnknownPortal) and returns the secret of the session it opens, which
// ends when the link would have.
func (p *Producer) RedeemPortalLink(ctx context.Context, link string) (string, PortalGrant, error) {
	if !strings.HasPrefix(link, PortalLinkPrefix) {
		return "", PortalGrant{}, ErrUnknownPortal
	}
	// Its time left and its grant, read and deleted at once: the session
	// gets the link's TTL, in Redis' clock.
	key := p.keys.PortalLink(tokenDigest(link))
	var ttl *redis.DurationCmd
	var get *redis.StringCmd
	_, err := p.rdb.TxPipelined(ctx, func(pl redis.Pipeliner) error {
		ttl, get = pl.PTTL(ctx, key), pl.GetDel(ctx, key)
		return nil
	})
	if errors.Is(err, redis.Nil) {
		return "", PortalGrant{}, ErrUnknownPortal
	}
	if err != nil {
		return "", PortalGrant{}, fmt.Errorf("%w: %v", ErrRedisUnavailable, err)
	}
	v, left := get.Val(), ttl.Val()
	g, ok := parseGrant(v)
	if !ok || left <= 0 {
		return "", PortalGrant{}, ErrUnknownPortal
	}
	if _, err := p.GetTenant(ctx, g.Tenant); err != nil {
		return "", PortalGrant{}, portalTenantErr(err)
	}
	secret := PortalSessionPrefix + randomSecret()
	if err := p.rdb.Set(ctx, p.keys.PortalSession(tokenDigest(secret)), v, left).Err(); err != nil {
		// The link is spent: the operator's app makes another.
		return "", PortalGrant{}, fmt.Errorf("%w: %v", ErrRedisUnavailable, err)
	}
	return secret, g, nil
}

// PortalSession returns the grant of a live session's secret (whether its
// tenant is still registered is the caller's to check: web keeps its
// tenants' records a second).
func (p *Producer) PortalSession(ctx context.Context, secret string) (PortalGrant, error) {
	if !strings.HasPrefix(secret, PortalSessionPrefix) {
		return PortalGrant{}, ErrUnknownPortal
	}
	v, err := p.rdb.Get(ctx, p.keys.PortalSession(tokenDigest(secret))).Result()
	if errors.Is(err, redis.Nil) {
		return PortalGrant{}, ErrUnknownPortal
	}
	if err != nil {
		return PortalGrant{}, fmt.Errorf("%w: %v", ErrRedisUnavailable, err)
	}
	g, ok := parseGrant(v)
	if !ok {
		return PortalGrant{}, ErrUnknownPortal
	}
	return g, nil
}

// EndPortalSession ends a session (its user signed out).
func (p *Producer) EndPortalSession(ctx context.Context, secret string) error {
	if err := p.rdb.Del(ctx, p.keys.PortalSession(tokenDigest(secret))).Err(); err != nil {
		return fmt.Errorf("%w: %v", ErrRedisUnavailable, err)
	}
	return nil
}

// portalTenantErr: a grant whose tenant was deleted is no grant.
func portalTenantErr(err error) error {
	if errors.Is(err, ErrUnknownTenant) {
		return ErrUnknownPortal
	}
	return err
}

func (g PortalGrant) encode() string {
	return g.Tenant + " " + strconv.FormatInt(g.Expires.UnixMilli(), 10)
}

func parseGrant(v string) (PortalGrant, bool) {
	tenant, ms, ok := strings.Cut(v, " ")
	n, err := strconv.ParseInt(ms, 10, 64)
	if !ok || err != nil || tasks.ValidateTenant(tenant) != nil {
		return PortalGrant{}, false
	}
	return PortalGrant{Tenant: tenant, Expires: time.UnixMilli(n).UTC()}, true
}

// randomSecret is 32 random bytes, URL-safe.
func randomSecret() string {
	var raw [32]byte
	_, _ = rand.Read(raw[:])
	return base64.RawURLEncoding.EncodeToString(raw[:])
}
