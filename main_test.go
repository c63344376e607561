package main

import (
	"log/slog"
	"os"
	"strings"
	"testing"

	"github.com/hooklane/hooklane/deploy/testkit"
)

// TestMain runs the tests, checking for leaked goroutines, or, with
// HOOKLANE_TEST_MAIN=1, runs this test binary as the hooklane command
// (`hooklane.test worker`): make test has the worker-process tests start
// it (HOOKLANE_TEST_BIN), a race-built hooklane linked with the other test
// binaries instead of once more on its own.
func TestMain(m *testing.M) {
	if os.Getenv("HOOKLANE_TEST_MAIN") == "1" {
		main()
		os.Exit(0)
	}
	testkit.Main(m, nil)
}

// HOOKLANE_LOG_LEVEL applies to every command, the demo too (whose
// default is errors only); a wrong value is refused, naming the variable.
func TestLogLevel(t *testing.T) {
	for _, c := range []struct {
		v    string
		demo bool
		want slog.Level
	}{{"", false, slog.LevelInfo}, {"", true, slog.LevelError}, {"debug", true, slog.LevelDebug}, {"warn", false, slog.LevelWarn}} {
		if got, err := logLevel(c.v, c.demo); err != nil || got != c.want {
			t.Errorf("logLevel(%q, demo %v) = %v, %v; want %v", c.v, c.demo, got, err, c.want)
		}
	}
	if _, err := logLevel("loud", false); err == nil || !strings.Contains(err.Error(), "HOOKLANE_LOG_LEVEL") {
		t.Errorf("logLevel(loud): %v; want an error naming HOOKLANE_LOG_LEVEL", err)
	}
}
