package testkit

import (
	"context"
	"fmt"
	"os"
	"sync/atomic"
	"testing"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/hooklane/hooklane/deploy"
)

// Main is a test package's TestMain: it starts a redis-server on a free
// 127.0.0.1 port, stores it in *srv (none when srv is nil), runs the
// tests, stops Redis, runs cleanups, and fails the run if a test left a
// goroutine behind. It does not return.
//
//	var redisSrv *deploy.Redis
//	func TestMain(m *testing.M) { testkit.Main(m, &redisSrv) }
func Main(m *testing.M, srv **deploy.Redis, cleanups ...func()) {
	os.Exit(run(m, srv, cleanups))
}

func run(m *testing.M, srv **deploy.Redis, cleanups []func()) int {
	// Fault tests stop Redis on purpose; go-redis would log every refused dial.
	redis.SetLogger(quietRedis{})
	var r *deploy.Redis
	if srv != nil {
		var err error
		if r, err = deploy.StartRedis(context.Background(), deploy.RedisOpts{}); err != nil {
			fmt.Fprintln(os.Stderr, "testkit:", err)
			return 1
		}
		*srv = r
	}
	code := m.Run()
	if r != nil {
		r.Stop()
	}
	for _, f := range cleanups {
		f()
	}
	if code != 0 {
		return code // a failed test may leave goroutines; its failure says more
	}
	if err := goleak.Find(leakIgnores...); err != nil {
		fmt.Fprintln(os.Stderr, "testkit: goroutines left running after the tests:", err)
		return 1
	}
	return 0
}

// leakIgnores are goroutines that outlive every test by design, none of
// them hooklane's.
var leakIgnores = []goleak.Option{}

type quietRedis struct{}

func (quietRedis) Printf(context.Context, string, ...any) {}

var nsSeq atomic.Int64

// Namespace returns a name no other call in this process returns, so that
// tests sharing a Redis (and `go test -count=N`) never see each other's keys.
func Namespace(prefix string) string {
	return fmt.Sprintf("%s%d", prefix, nsSeq.Add(1))
}
