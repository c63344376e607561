// Package deploy holds what it takes to run hooklane beside Redis: the
// production redis.conf, a helper that starts a local redis-server for
// `make run` and for the test suites, and (in later issues) the load harness.
package deploy
