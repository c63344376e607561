package limits

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/go-redis/redis_rate/v10"
)

// Limit is a destination's rate limit: Rate requests per Period, with bursts
// of up to Burst requests. It mirrors redis_rate.Limit.
type Limit struct {
	Rate   int
	Burst  int
	Period time.Duration
}

// DefaultLimit applies to subscribers registered without a limit.
var DefaultLimit = Limit{Rate: 10, Burst: 20, Period: time.Second}

// PerSecond is a Limit of n requests per second with a burst of n.
func PerSecond(n int) Limit { return Limit{Rate: n, Burst: n, Period: time.Second} }

func (l Limit) String() string {
	return fmt.Sprintf("%d req/%s (burst %d)", l.Rate, l.Period, l.Burst)
}

// IsZero reports whether l is unset.
func (l Limit) IsZero() bool { return l == Limit{} }

// PerSecond is the limit's rate in requests per second.
func (l Limit) PerSecond() float64 { return float64(l.Rate) / l.Period.Seconds() }

// Interval is the time between two requests at the sustained rate.
func (l Limit) Interval() time.Duration { return l.Period / time.Duration(l.Rate) }

// Validate names the first field that is out of range.
func (l Limit) Validate() error {
	switch {
	case l.Rate < 1 || l.Rate > 1_000_000:
		return errors.New("limit.rate: must be between 1 and 1000000")
	case l.Burst < 1 || l.Burst > 1_000_000:
		return errors.New("limit.burst: must be between 1 and 1000000")
	case l.Period < time.Millisecond || l.Period > 24*time.Hour:
		return errors.New("limit.period: must be between 1ms and 24h")
	case l.Interval() <= 0:
		return errors.New("limit: rate too high for period")
	}
	return nil
}

// RedisRate is the same limit as a redis_rate.Limit.
func (l Limit) RedisRate() redis_rate.Limit {
	return redis_rate.Limit{Rate: l.Rate, Burst: l.Burst, Period: l.Period}
}

type limitJSON struct {
	Rate   int    `json:"rate"`
	Burst  int    `json:"burst"`
	Period string `json:"period"`
}

// MarshalJSON writes the period as a Go duration string ("1s").
func (l Limit) MarshalJSON() ([]byte, error) {
	return json.Marshal(limitJSON{l.Rate, l.Burst, l.Period.String()})
}

// UnmarshalJSON reads the period as a Go duration string ("1s", "1m").
func (l *Limit) UnmarshalJSON(b []byte) error {
	var v limitJSON
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	p, err := time.ParseDuration(v.Period)
	if err != nil {
		return fmt.Errorf("limit.period: %w", err)
	}
	*l = Limit{Rate: v.Rate, Burst: v.Burst, Period: p}
	return nil
}
