package loadtest

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/hooklane/hooklane/deploy"
)

// TypeFloorPost is the floor's only task type.
const TypeFloorPost = "floor:post"

// FloorPost is a floor task's payload.
type FloorPost struct {
	URL  string          `json:"url"`
	Body json.RawMessage `json:"body"`
}

// FloorConfig configures ServeFloor. Zero fields take the defaults named.
type FloorConfig struct {
	// RedisConfig is used when Redis is nil.
	RedisConfig deploy.RedisConfig
	Redis       redis.UniversalClient
	// Queue to serve. Required.
	Queue string
	// Concurrency, as the worker's, of each Server. Default 200.
	Concurrency int
	// Servers is the number of asynq Servers on Queue in this process,
	// each with a dequeue loop of its own, as a hooklane worker runs
	// several per lane. Default 1.
	Servers int
}

// WithDefaults fills the zero fields.
func (c FloorConfig) WithDefaults() FloorConfig {
	c.Concurrency = cmp.Or(c.Concurrency, 200)
	c.Servers = cmp.Or(c.Servers, 1)
	return c
}

func (c FloorConfig) validate() error {
	switch {
	case c.Queue == "":
		return errors.New("floor: Queue is required")
	case c.Redis == nil && !c.RedisConfig.IsSet():
		return errors.New("floor: RedisConfig or Redis is required")
	case c.Concurrency < 1:
		return errors.New("floor: Concurrency must be at least 1")
	case c.Servers < 1 || c.Servers > maxProcs:
		return fmt.Errorf("floor: Servers must be 1-%d, not %d", maxProcs, c.Servers)
	}
	return nil
}

// ServeFloor runs the floor until ctx is done: a plain asynq server whose
// handler only POSTs each task's body to its URL. No gates, no signing, no
// counters, no result: what asynq plus an HTTP client cost on this machine,
// the most hooklane could hope for. Its asynq settings (poll and forward
// intervals, concurrency) are the worker's defaults, so that only
// hooklane's own work differs.
func ServeFloor(ctx context.Context, c FloorConfig) error {
	c = c.WithDefaults()
	if err := c.validate(); err != nil {
		return err
	}
	rdb := c.Redis
	if rdb == nil {
		client, err := c.RedisConfig.NewClient(deploy.ClientTuning{})
		if err != nil {
			return fmt.Errorf("floor: %w", err)
		}
		defer client.Close()
		rdb = client
	}
	// The same transport settings as the worker's client, so connection
	// reuse is alike.
	dialer := &net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}
	client := &http.Client{Timeout: 15 * time.Second, Transport: &http.Transport{
		DialContext: dialer.DialContext, MaxIdleConns: 1024, MaxIdleConnsPerHost: 128, IdleConnTimeout: 90 * time.Second,
	}}
	mux := asynq.NewServeMux()
	mux.HandleFunc(TypeFloorPost, func(ctx context.Context, t *asynq.Task) error {
		var p FloorPost
		if err := json.Unmarshal(t.Payload(), &p); err != nil {
			return fmt.Errorf("%v: %w", err, asynq.SkipRetry)
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, p.URL, bytes.NewReader(p.Body))
		if err != nil {
			return fmt.Errorf("%v: %w", err, asynq.SkipRetry)
		}
		req.Header.Set("Content-Type", "application/json")
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
		resp.Body.Close()
		if resp.StatusCode/100 != 2 {
			return fmt.Errorf("HTTP %d", resp.StatusCode)
		}
		return nil
	})
	var srvs []*asynq.Server
	shutdown := func() {
		var wg sync.WaitGroup
		for _, srv := range srvs {
			wg.Go(srv.Shutdown)
		}
		wg.Wait()
	}
	for range c.Servers {
		srv := asynq.NewServerFromRedisClient(rdb, asynq.Config{
			Concurrency:              c.Concurrency,
			Queues:                   map[string]int{c.Queue: 1},
			TaskCheckInterval:        100 * time.Millisecond,
			DelayedTaskCheckInterval: 250 * time.Millisecond,
			LogLevel:                 asynq.WarnLevel,
		})
		if err := srv.Start(mux); err != nil {
			shutdown()
			return err
		}
		srvs = append(srvs, srv)
	}
	slog.Info("floor started", "queue", c.Queue, "concurrency", c.Concurrency, "servers", c.Servers)
	<-ctx.Done()
	shutdown()
	return nil
}
