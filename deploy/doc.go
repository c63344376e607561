// Package deploy holds what it takes to run hooklane beside Redis: the
// production redis.conf, RedisConfig (one way for every process to say
// which Redis: one server, a Cluster or Sentinel) and helpers that start
// local redis-servers on 127.0.0.1 for `make run`, `make bench` and the
// test suites: a single server (StartRedis) and a Redis Cluster
// (StartCluster); and AutoPipeline, a client whose concurrent commands
// share round trips. Its subpackages: loadtest, the load harness behind
// `make bench` (see BENCHMARKS.md); testkit, what the tests share (a
// Sentinel set, sinks, polling, goleak in every TestMain).
package deploy
