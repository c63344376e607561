package producer

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hooklane/hooklane/tasks"
)

// What a tenant's API token may do (Token.Scopes).
const (
	ScopePublish = "publish" // publish events (POST …/events, …/events/batch)
	ScopeRead    = "read"    // read subscribers, events, deliveries, dead letters, status
	ScopeManage  = "manage"  // change them: subscribers, pauses, secrets, resends, replays, dead letters
)

// Scopes are every scope, in the order a token lists them.
var Scopes = []string{ScopePublish, ScopeRead, ScopeManage}

// ErrUnknownToken: no live token has that id (or secret): never created,
// revoked, or expired.
var ErrUnknownToken = errors.New("unknown token")

// TokenPrefix starts every tenant token's secret, so that it is told from
// the operator's token at a glance (and by a secret scanner).
const TokenPrefix = "hlt_"

// Token is a tenant's API token, without its secret (which is shown once,
// by CreateToken, and stored as its SHA-256 only).
type Token struct {
	ID         string    `json:"id"`
	Tenant     string    `json:"tenant"`
	Scopes     []string  `json:"scopes"`
	CreatedAt  time.Time `json:"created_at"`
	ExpiresAt  time.Time `json:"expires_at,omitzero"`   // zero: never
	LastUsedAt time.Time `json:"last_used_at,omitzero"` // zero: never used (to the minute: TouchToken)
}

// Allows reports whether t has scope.
func (t Token) Allows(scope string) bool { return slices.Contains(t.Scopes, scope) }

// storedToken is a token as stored: with its secret's digest (the key of
// its TokenDigests entry), so that revoking it deletes that entry too.
type storedToken struct {
	Token
	Digest string `json:"digest"`
}

// tokenDigest is what a token's secret is stored as.
func tokenDigest(secret string) string {
	sum := sha256.Sum256([]byte(secret))
	return hex.EncodeToString(sum[:])
}

// CreateToken creates a token of registered tenant with scopes (a
// non-empty subset of Scopes) that expires at expires (zero: never; else
// in the future), and returns it with its secret, shown this once.
func (p *Producer) CreateToken(ctx context.Context, tenant string, scopes []string, expires time.Time) (Token, string, error) {
	if len(scopes) == 0 {
		return Token{}, "", &tasks.FieldError{Field: "scopes", Msg: "want one or more of " + strings.Join(Scopes, ", ")}
	}
	var sorted []string
	for _, s := range Scopes {
		if slices.Contains(scopes, s) {
			sorted = append(sorted, s)
		}
	}
	for _, s := range scopes {
		if !slices.Contains(Scopes, s) {
			return Token{}, "", &tasks.FieldError{Field: "scopes", Msg: fmt.Sprintf("want one or more of %s, got %q", strings.Join(Scopes, ", "), s)}
		}
	}
	now := p.nowFunc().UTC().Truncate(time.Millisecond)
	if !expires.IsZero() && !expires.After(now) {
		return Token{}, "", &tasks.FieldError{Field: "expires_at", Msg: "want a time in the future"}
	}
	if _, err := p.GetTenant(ctx, tenant); err != nil {
		return Token{}, "", err
	}
	var id [8]byte
	_, _ = rand.Read(id[:])
	secret := TokenPrefix + randomSecret()
	t := Token{ID: "tok_" + hex.EncodeToString(id[:]), Tenant: tenant, Scopes: sorted, CreatedAt: now,
		ExpiresAt: expires.UTC().Truncate(time.Millisecond)}
	digest := tokenDigest(secret)
	b, _ := json.Marshal(storedToken{t, digest}) // plain data: cannot fail
	_, err := p.rdb.TxPipelined(ctx, func(pl redis.Pipeliner) error {
		pl.HSet(ctx, p.keys.Tokens(), t.ID, b)
		pl.HSet(ctx, p.keys.TokenDigests(), digest, t.ID)
		pl.SAdd(ctx, p.keys.TenantTokens(tenant), t.ID)
		return nil
	})
	if err != nil {
		return Token{}, "", fmt.Errorf("%w: %v", ErrRedisUnavailable, err)
	}
	return t, secret, nil
}

// Tokens lists tenant's tokens (those expired included), in creation
// order, without their secrets.
func (p *Producer) Tokens(ctx context.Context, tenant string) ([]Token, error) {
	ids, err := p.rdb.SMembers(ctx, p.keys.TenantTokens(tenant)).Result()
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrRedisUnavailable, err)
	}
	out := []Token{}
	if len(ids) == 0 {
		return out, nil
	}
	var v, u *redis.SliceCmd
	_, err = p.rdb.Pipelined(ctx, func(pl redis.Pipeliner) error {
		v, u = pl.HMGet(ctx, p.keys.Tokens(), ids...), pl.HMGet(ctx, p.keys.TokensUsed(), ids...)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrRedisUnavailable, err)
	}
	vals, used := v.Val(), u.Val()
	for i, v := range vals {
		if t, ok := parseToken(v, used[i]); ok && t.Tenant == tenant {
			out = append(out, t.Token)
		}
	}
	slices.SortFunc(out, func(a, b Token) int { return a.CreatedAt.Compare(b.CreatedAt) })
	return out, nil
}

func parseToken(v, used any) (storedToken, bool) {
	s, ok := v.(string)
	var t storedToken
	if !ok || json.Unmarshal([]byte(s), &t) != nil {
		return t, false
	}
	if u, ok := used.(string); ok {
		if ms, err := strconv.ParseInt(u, 10, 64); err == nil {
			t.LastUsedAt = time.UnixMilli(ms).UTC()
		}
	}
	return t, true
}

// RevokeToken deletes tenant's token id: it is refused from then on (by
// every web process within a second, the time they keep a lookup).
func (p *Producer) RevokeToken(ctx context.Context, tenant, id string) error {
	v, err := p.rdb.HGet(ctx, p.keys.Tokens(), id).Result()
	if errors.Is(err, redis.Nil) {
		return fmt.Errorf("%w: %s", ErrUnknownToken, id)
	}
	if err != nil {
		return fmt.Errorf("%w: %v", ErrRedisUnavailable, err)
	}
	t, ok := parseToken(v, nil)
	if !ok || t.Tenant != tenant {
		return fmt.Errorf("%w: %s", ErrUnknownToken, id)
	}
	return p.dropToken(ctx, t)
}

// dropToken deletes stored token t and its digest's entry.
func (p *Producer) dropToken(ctx context.Context, t storedToken) error {
	id, tenant := t.ID, t.Tenant
	_, err := p.rdb.TxPipelined(ctx, func(pl redis.Pipeliner) error {
		pl.HDel(ctx, p.keys.TokenDigests(), t.Digest)
		pl.HDel(ctx, p.keys.Tokens(), id)
		pl.HDel(ctx, p.keys.TokensUsed(), id)
		pl.SRem(ctx, p.keys.TenantTokens(tenant), id)
		return nil
	})
	if err != nil {
		return fmt.Errorf("%w: %v", ErrRedisUnavailable, err)
	}
	return nil
}

// LookupToken returns the live token whose secret is secret, or
// ErrUnknownToken (revoked, expired, never created).
func (p *Producer) LookupToken(ctx context.Context, secret string) (Token, error) {
	digest := tokenDigest(secret)
	id, err := p.rdb.HGet(ctx, p.keys.TokenDigests(), digest).Result()
	if errors.Is(err, redis.Nil) {
		return Token{}, ErrUnknownToken
	}
	if err != nil {
		return Token{}, fmt.Errorf("%w: %v", ErrRedisUnavailable, err)
	}
	v, err := p.rdb.HGet(ctx, p.keys.Tokens(), id).Result()
	if errors.Is(err, redis.Nil) { // revoked between the two reads
		return Token{}, ErrUnknownToken
	}
	if err != nil {
		return Token{}, fmt.Errorf("%w: %v", ErrRedisUnavailable, err)
	}
	t, ok := parseToken(v, nil)
	if !ok || t.Digest != digest || !t.ExpiresAt.IsZero() && !p.nowFunc().Before(t.ExpiresAt) {
		return Token{}, ErrUnknownToken
	}
	return t.Token, nil
}

// TouchToken records that token id was used at at (its last_used_at).
func (p *Producer) TouchToken(ctx context.Context, id string, at time.Time) error {
	return p.rdb.HSet(ctx, p.keys.TokensUsed(), id, at.UnixMilli()).Err()
}

// deleteTokens revokes every token of tenant.
func (p *Producer) deleteTokens(ctx context.Context, tenant string) error {
	ids, err := p.rdb.SMembers(ctx, p.keys.TenantTokens(tenant)).Result()
	if err != nil {
		return fmt.Errorf("%w: %v", ErrRedisUnavailable, err)
	}
	for _, id := range ids {
		if err := p.RevokeToken(ctx, tenant, id); err != nil && !errors.Is(err, ErrUnknownToken) {
			return err
		}
	}
	return nil
}
