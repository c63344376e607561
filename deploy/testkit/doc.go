// Package testkit is what every hooklane test package shares: a
// redis-server per package started from TestMain (with a goroutine-leak
// check after the tests), a recording HTTP endpoint on 127.0.0.1, polling
// instead of sleeping, a log buffer safe for concurrent writers, unique
// namespaces and a tiny DNS server on loopback. It is for tests only; no
// production code imports it.
package testkit
