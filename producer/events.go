package producer

import (
	"context"
	"crypto/sha1" //nolint:gosec // names a body for Redis' sha1hex, not a secret
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hooklane/hooklane/limits"
	"github.com/hooklane/hooklane/tasks"
)

// The stored event's rules (tasks/event.go names its fields):
//
//   - one event per id: the first publish stores its body (what every
//     subscriber is sent, byte for byte) and digest; a publish of the id
//     with another type or data (compared as JSON values) is refused,
//     nothing written; the same event again only adds its subscribers and
//     extends its life.
//   - it lives from its due time on: until the latest due time it was
//     published with + max(payload retention, the longest retry horizon of
//     its subscribers + EventMargin), so that every delivery that refers to
//     it finds it for as long as it may run, and a resend finds it for the
//     retention.

// KEYS: 1 the event (hash), 2 the release before's copy (a string, read
// only). ARGV: 1 body, 2 digest, 3 "1" compare (a publish; a resend or
// replay never conflicts), 4 how long to keep it from now at least (ms), 5
// the stored body's check, "<sha1 of the stored body> <its digest>" ("":
// none yet), then the subscriber ids. Reply {code, body}: "ok", "conflict"
// (another event has the id: nothing written), or "check" with the stored
// body, when a publish finds an event stored without a digest (by the
// release before, or re-stored by a replay of that release) and no check
// of that body: the caller computes its digest and calls again with ARGV[5]
// (nothing written but the release before's copy moved into the hash). A missing digest is written once the body's
// is found equal to the caller's, and with a body the call stores.
var storeEventScript = redis.NewScript(`
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
local h = redis.call('HMGET', KEYS[1], 'b', 'h', 's')
if not h[1] then
  local legacy = redis.call('GET', KEYS[2])
  if legacy then
    local i = string.find(legacy, '\n', 1, true)
    local head = string.sub(legacy, 1, i - 1)
    local p = string.match(head, '^(%d+)')
    local subs = string.sub(head, string.len(p) + 2)
    redis.call('HSET', KEYS[1], 'b', string.sub(legacy, i + 1), 'p', p, 's', subs)
    h = {string.sub(legacy, i + 1), false, subs}
  end
end
local compare = ARGV[3] == '1'
if h[1] and not h[2] and compare then
  -- no digest stored: the body's, once the caller has computed it
  local sha, digest = string.match(ARGV[5], '^(%S+) (%S+)$')
  if sha ~= redis.sha1hex(h[1]) then return {'check', h[1]} end
  if digest ~= ARGV[2] then return {'conflict', ''} end
  redis.call('HSET', KEYS[1], 'h', digest)
  h[2] = digest
end
if h[1] and compare and h[2] ~= ARGV[2] then return {'conflict', ''} end
local subs, seen, changed = h[3] or '', {}, false
for s in string.gmatch(subs, '%S+') do seen[s] = true end
for i = 6, #ARGV do
  if not seen[ARGV[i]] then
    subs, seen[ARGV[i]], changed = subs .. ' ' .. ARGV[i], true, true
  end
end
if not h[1] then
  -- a new event: one write, and a key without a lifetime yet
  redis.call('HSET', KEYS[1], 'b', ARGV[1], 'p', now, 's', subs, 'h', ARGV[2])
  redis.call('PEXPIRE', KEYS[1], ARGV[4])
  return {'ok', ''}
end
if changed then redis.call('HSET', KEYS[1], 's', subs) end
if redis.call('PTTL', KEYS[1]) < tonumber(ARGV[4]) then redis.call('PEXPIRE', KEYS[1], ARGV[4]) end
return {'ok', ''}`)

// EventMargin is how long a stored event outlives the retry horizon of the
// deliveries that refer to it, at least: a delivery is handed out up to
// its horizon and runs a little after it (a busy lane, a lost lease's
// recovery) to be dead-lettered, with its event.
const EventMargin = 10 * time.Minute

// storeEvent stores ev for subs, due at notBefore (zero: now), in a round
// trip of its own before the bookings: a conflict must stop the publish
// before it books anything. compare refuses another event under the id
// (a publish); a resend or replay sends the event stored, and stores it
// again only if it expired.
func (p *Producer) storeEvent(ctx context.Context, ev tasks.Event, subs []tasks.Subscriber, notBefore time.Time, compare bool) error {
	call, err := p.storeCall(ev, subs, notBefore, compare)
	if err != nil {
		return err
	}
	for range 3 {
		res, err := storeEventScript.Run(ctx, p.rdb, call.Keys, call.Args...).StringSlice()
		if err != nil {
			return fmt.Errorf("%w: %v", ErrRedisUnavailable, err)
		}
		switch res[0] {
		case "ok":
			return nil
		case "check":
			// Stored without a digest: compared by the stored body's, which
			// the next call writes if the body is still the one checked.
			call.Args[4] = checkStored(res[1])
			continue
		}
		return errConflict(ev.ID)
	}
	return fmt.Errorf("%w: event %s's stored copy kept changing while it was compared; publish again", ErrRedisUnavailable, ev.ID)
}

// storeCall is storeEvent's script call: see storeEventScript.
func (p *Producer) storeCall(ev tasks.Event, subs []tasks.Subscriber, notBefore time.Time, compare bool) (*limits.Call, error) {
	// A resend or replay stores its digest too, should it store the event
	// again: a publish of the id compares with it.
	digest, err := tasks.EventDigest(ev.Type, ev.Data)
	if err != nil {
		return nil, &tasks.FieldError{Field: "data", Msg: "not valid JSON"}
	}
	keep := p.cfg.PayloadRetention
	args := make([]any, 0, 5+len(subs))
	args = append(args, tasks.EventBody(ev), digest, "0", 0, "")
	if compare {
		args[2] = "1"
	}
	for _, s := range subs {
		keep = max(keep, p.horizon(s)+EventMargin)
		args = append(args, s.ID)
	}
	if d := time.Until(notBefore); d > 0 {
		keep += d
	}
	args[3] = keep.Milliseconds()
	// under its subscribers' tenant (one call's share one)
	tenant := p.writeTenant()
	if len(subs) > 0 {
		tenant = tasks.TenantOf(subs[0].ID)
	}
	event, legacy := p.tenantEventKeys(tenant, ev.ID)
	return &limits.Call{Script: storeEventScript, Keys: []string{event, legacy}, Args: args}, nil
}

// errConflict is a publish's refusal of event id stored with another type
// or data.
func errConflict(id string) error {
	return fmt.Errorf("%w: event %s was published before with another type or other data; an id names one event: "+
		"publish this one under a new id", ErrEventConflict, id)
}

// checkStored is storeEventScript's check of a stored body: its SHA-1 (as
// Redis' sha1hex) and its digest. A body that does not parse as an event
// gets a digest no publish has, so the publish conflicts.
func checkStored(body string) string {
	digest := "unreadable"
	var ev tasks.Event
	if json.Unmarshal([]byte(body), &ev) == nil {
		if d, err := tasks.EventDigest(ev.Type, ev.Data); err == nil {
			digest = d
		}
	}
	return sha1hex([]byte(body)) + " " + digest
}

// sha1hex is b's SHA-1 in hex, as Redis' redis.sha1hex names a value a
// script compares (a name, not a secret).
func sha1hex(b []byte) string {
	sum := sha1.Sum(b) //nolint:gosec // see above
	return hex.EncodeToString(sum[:])
}

// StoredEvent reads event id as stored (by this release or the one
// before), its subscribers by p's ids.
func (p *Producer) StoredEvent(ctx context.Context, id string) (tasks.StoredEvent, error) {
	se, err := p.storedEvent(ctx, id)
	if p.tenant != "" {
		subs := make([]string, len(se.Subscribers))
		for i, s := range se.Subscribers {
			subs[i] = p.ext(s)
		}
		se.Subscribers = subs
	}
	return se, err
}

// storedEvent is StoredEvent with its subscribers' stored ids.
func (p *Producer) storedEvent(ctx context.Context, id string) (tasks.StoredEvent, error) {
	var h *redis.MapStringStringCmd
	var legacy *redis.StringCmd
	_, err := p.rdb.Pipelined(ctx, func(pl redis.Pipeliner) error {
		ek, lk := p.eventKeys(id)
		h, legacy = pl.HGetAll(ctx, ek), pl.Get(ctx, lk)
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return tasks.StoredEvent{}, fmt.Errorf("%w: %v", ErrRedisUnavailable, err)
	}
	if se, ok := tasks.ParseStoredEvent(h.Val()); ok {
		return se, nil
	}
	if se, ok := tasks.ParseLegacyEvent(legacy.Val()); ok {
		return se, nil
	}
	return tasks.StoredEvent{}, fmt.Errorf("%w: %s (never published, or past the payload retention of %s)",
		ErrUnknownEvent, id, tasks.DurationWords(p.cfg.PayloadRetention))
}
