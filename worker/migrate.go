package worker

import (
	"context"
	"encoding/json"
	"fmt"
	"io"

	"github.com/hooklane/hooklane/producer"
)

// Migrate is `hooklane migrate`: it carries over what the release before
// wrote to cfg's namespace since the workers migrated it at start (e.g.
// subscribers its API created during a rolling upgrade), without touching
// what this release changed, and prints the report as JSON. Safe to run
// any number of times.
func Migrate(ctx context.Context, cfg Config, out io.Writer) error {
	cfg = cfg.WithDefaults()
	cfg.warnGone()
	rdb := cfg.Redis
	if rdb == nil {
		var err error
		if rdb, err = cfg.RedisConfig.NewClient(redisTuning); err != nil {
			return fmt.Errorf("migrate: %w", err)
		}
		defer rdb.Close()
	}
	p, err := producer.New(&producer.Config{Redis: rdb, Namespace: cfg.Namespace, Logger: cfg.Logger})
	if err != nil {
		return err
	}
	rep, err := p.Migrate(ctx, true)
	if err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	b, _ := json.Marshal(rep)
	_, err = fmt.Fprintf(out, "%s\n", b)
	return err
}
