package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/hooklane/hooklane/deploy/testkit"
	"github.com/hooklane/hooklane/worker"
)

// TestMain runs the tests, checking for leaked goroutines, or, with
// HOOKLANE_TEST_MAIN=1, runs this test binary as the hooklane command
// (`hooklane.test worker`): make test has the worker-process tests start
// it (HOOKLANE_TEST_BIN), a race-built hooklane linked with the other test
// binaries instead of once more on its own.
func TestMain(m *testing.M) {
	if os.Getenv("HOOKLANE_TEST_MAIN") == "1" {
		if spec := os.Getenv("HOOKLANE_FAULT"); spec != "" {
			if err := installFault(spec); err != nil {
				fmt.Fprintln(os.Stderr, err)
				os.Exit(2)
			}
		}
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

// installFault sets worker.FaultHook from HOOKLANE_FAULT, "<mode>:<point>"
// or "<mode>:<point>@<n>" (the n-th time the point is reached; default the
// first): mode kill-before or kill-after stops the process there with
// SIGKILL, before or after the point's step; lose runs the step and
// answers an error as if its reply was lost; fail answers an error without
// running it. Only this test binary has the switch: the release build has
// no code that reads HOOKLANE_FAULT.
func installFault(spec string) error {
	mode, rest, ok := strings.Cut(spec, ":")
	point, nth, at := rest, 1, ""
	if p, n, found := strings.Cut(rest, "@"); found {
		point, at = p, n
	}
	if at != "" {
		var err error
		if nth, err = strconv.Atoi(at); err != nil || nth < 1 {
			return fmt.Errorf("HOOKLANE_FAULT %q: %q is not a count", spec, at)
		}
	}
	known := false
	for _, p := range worker.FaultPoints {
		known = known || p == point
	}
	switch {
	case !ok || !known:
		return fmt.Errorf("HOOKLANE_FAULT %q: want <mode>:<point>[@n] with a point of %v", spec, worker.FaultPoints)
	case mode != "kill-before" && mode != "kill-after" && mode != "lose" && mode != "fail":
		return fmt.Errorf("HOOKLANE_FAULT %q: mode %q is not kill-before, kill-after, lose or fail", spec, mode)
	}
	var hits atomic.Int64
	worker.FaultHook = func(_ context.Context, p string, step func() error) error {
		run := func() error {
			if step == nil {
				return nil
			}
			return step()
		}
		if p != point || hits.Add(1) != int64(nth) {
			return run()
		}
		fmt.Fprintf(os.Stderr, "fault point %s: %s\n", p, mode)
		switch mode {
		case "kill-before":
			die()
		case "kill-after":
			err := run()
			die()
			return err
		case "fail":
			return errFault
		}
		if err := run(); err != nil {
			return err
		}
		return errFault
	}
	return nil
}

var errFault = errors.New("fault point: this step's Redis reply was lost (HOOKLANE_FAULT)")

// die stops the process as kill -9 does: no deferred call, no flush.
func die() {
	_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
	select {}
}

// `hooklane dev`'s flags: -fresh, -redis-port; anything else is refused.
func TestDevFlags(t *testing.T) {
	o, err := devOptions([]string{"-fresh", "-redis-port", "6390"})
	if err != nil || !o.Fresh || o.RedisPort != 6390 {
		t.Fatalf("devOptions(-fresh -redis-port 6390) = %+v, %v", o, err)
	}
	if o, err := devOptions(nil); err != nil || o.Fresh || o.RedisPort != 6379 {
		t.Fatalf("devOptions() = %+v, %v; want not fresh, port 6379", o, err)
	}
	for _, args := range [][]string{{"extra"}, {"-redis-port", "0"}, {"-nope"}} {
		if _, err := devOptions(args); err == nil {
			t.Errorf("devOptions(%q) = nil error; want a refusal", args)
		}
	}
}
