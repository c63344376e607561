package testkit

import (
	"bufio"
	"context"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Monitor returns the commands Redis at addr ran while do ran (MONITOR's
// lines, between two ECHO markers of its own), those run inside Lua
// included. MONITOR sees every client: give the test a server of its own.
func Monitor(t testing.TB, addr string, do func()) []string {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Write([]byte("MONITOR\r\n")); err != nil {
		t.Fatal(err)
	}
	var (
		mu    sync.Mutex
		lines []string
		wg    sync.WaitGroup
	)
	wg.Go(func() {
		sc := bufio.NewScanner(conn)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			mu.Lock()
			lines = append(lines, sc.Text())
			mu.Unlock()
		}
	})
	defer func() { conn.Close(); wg.Wait() }()
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer c.Close()
	seen := func(marker string) func() bool {
		return func() bool {
			mu.Lock()
			defer mu.Unlock()
			for _, l := range lines {
				if strings.Contains(l, marker) {
					return true
				}
			}
			return false
		}
	}
	Eventually(t, 5*time.Second, "MONITOR to start", func() bool {
		c.Echo(context.Background(), "monitor-start")
		return seen(`"monitor-start"`)()
	})
	do()
	c.Echo(context.Background(), "monitor-end")
	Eventually(t, 5*time.Second, "MONITOR to show the end marker", seen(`"monitor-end"`))
	mu.Lock()
	defer mu.Unlock()
	var out []string
	in := false
	for _, l := range lines {
		switch {
		case strings.Contains(l, `"monitor-start"`):
			in, out = true, nil
		case strings.Contains(l, `"monitor-end"`):
			return out
		case in:
			out = append(out, l)
		}
	}
	return out
}
