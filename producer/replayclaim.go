package producer

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hooklane/hooklane/limits"
	"github.com/hooklane/hooklane/tasks"
)

// A replay (or a resend of a dead delivery) claims its ledger entry before
// it books anything, so that two at once (two operators, a retry beside
// the call it retries) book the delivery once: the claim names the entry
// as the replay read it, and one already claimed, or changed since
// (replayed, dead again), is left to the replay that has it.

// replayClaimTTL bounds a claim whose replay was cut off (a crash): the
// entry can be replayed again after it.
const replayClaimTTL = time.Minute

// KEYS: 1 the ledger entry, 2 its claim (tasks.LedgerKeys.Claim). ARGV: 1
// the replay's token, 2 the claim's ttl ms, 3 the SHA-1 of the entry as
// the replay read it. Reply: "ok" (claimed), "changed" (the entry is
// another or gone), "taken" (another replay holds it); nothing written
// but with "ok".
var claimReplayScript = redis.NewScript(`
local v = redis.call('GET', KEYS[1])
if not v or redis.sha1hex(v) ~= ARGV[3] then return 'changed' end
if not redis.call('SET', KEYS[2], ARGV[1], 'NX', 'PX', ARGV[2]) then return 'taken' end
return 'ok'`)

// KEYS: 1 the ledger entry, 2 its claim. ARGV: 1 the replay's token, 2 the
// SHA-1 of the entry as claimed (or as the replay rewrote it), 3 the entry
// marked replayed ("": not marked, nothing was sent). Ends the claim if it
// is still the replay's, and writes the marked entry if the entry is still
// the one claimed (a death of the delivery since wrote a new one, which
// stays) and the claim was the replay's. Reply: 1 marked (or nothing to
// mark), 0 not.
var endReplayScript = redis.NewScript(`
if redis.call('GET', KEYS[2]) ~= ARGV[1] then return 0 end
redis.call('DEL', KEYS[2])
if ARGV[3] == '' then return 1 end
local v = redis.call('GET', KEYS[1])
if not v or redis.sha1hex(v) ~= ARGV[2] then return 0 end
redis.call('SET', KEYS[1], ARGV[3], 'KEEPTTL')
return 1`)

// replayClaim is a replay's hold on a ledger entry.
type replayClaim struct {
	keys  tasks.LedgerKeys
	token string
	sha   string // of the entry as claimed, or as the replay rewrote it
}

// claimReplay claims e's ledger entry for a replay. When it is not claimed,
// o says why: another replay has it (or had it: the entry was replayed or
// changed since it was read), reported a duplicate; or a Redis failure.
func (p *Producer) claimReplay(ctx context.Context, e tasks.DeadLetter) (replayClaim, ReplayOutcome, bool) {
	c := replayClaim{keys: p.keys.Ledger(e.TaskID), token: limits.NewToken()}
	o := ReplayOutcome{TaskID: e.TaskID, Outcome: Failed}
	raw, err := p.rdb.Get(ctx, c.keys.Entry).Result()
	if errors.Is(err, redis.Nil) {
		o.Error = fmt.Sprintf("%v: %s was deleted meanwhile", ErrUnknownDeadLetter, e.TaskID)
		return c, o, false
	}
	if err != nil {
		o.Error = fmt.Sprintf("%v: %v", ErrRedisUnavailable, err)
		return c, o, false
	}
	// The entry as read now must be the one the replay was asked for: one
	// replayed or dead again since is another replay's business.
	now, ok := tasks.ParseLedger(raw, nil)
	if !ok || !now.DeadAt.Equal(e.DeadAt) || !now.ReplayedAt.Equal(e.ReplayedAt) {
		o.Outcome, o.Error = Duplicate, "replayed, or dead again, since it was read: left to that replay"
		return c, o, false
	}
	c.sha = sha1hex([]byte(raw))
	res, err := claimReplayScript.Run(ctx, p.rdb, []string{c.keys.Entry, c.keys.Claim}, c.token, replayClaimTTL.Milliseconds(), c.sha).Text()
	switch {
	case err != nil:
		o.Error = fmt.Sprintf("%v: %v", ErrRedisUnavailable, err)
		return c, o, false
	case res == "taken":
		o.Outcome, o.Error = Duplicate, "another replay of it is under way"
		return c, o, false
	case res == "changed":
		o.Outcome, o.Error = Duplicate, "replayed, or dead again, since it was read: left to that replay"
		return c, o, false
	}
	return c, o, true
}

// endReplay ends claim c, writing marked (the entry marked replayed; nil:
// not marked) if the entry is still the one claimed.
func (p *Producer) endReplay(ctx context.Context, c replayClaim, marked []byte) error {
	n, err := endReplayScript.Run(ctx, p.rdb, []string{c.keys.Entry, c.keys.Claim}, c.token, c.sha, marked).Int()
	if err != nil {
		return fmt.Errorf("%w: %v", ErrRedisUnavailable, err)
	}
	if n == 0 && marked != nil {
		return errors.New("the entry changed (or the claim lapsed) while it was replayed")
	}
	return nil
}
