// Package deploy holds what it takes to run hooklane beside Redis: the
// production redis.conf, RedisConfig (one way for every process to say
// which Redis: one server, a Cluster or Sentinel) and helpers that start
// local redis-servers on 127.0.0.1 for `make run` and the test suites: a
// single server (StartRedis), a Redis Cluster (StartCluster) and a master
// with a replica and three sentinels (StartSentinel). Its subpackage
// loadtest is the load harness behind `make bench` (see BENCHMARKS.md).
package deploy
