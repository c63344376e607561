// Package deploy holds what it takes to run hooklane beside Redis: the
// production redis.conf and a helper that starts a local redis-server for
// `make run` and for the test suites. Its subpackage loadtest is the load
// harness behind `make bench` (see BENCHMARKS.md).
package deploy
