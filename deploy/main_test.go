package deploy_test

import (
	"testing"

	"github.com/hooklane/hooklane/deploy"
	"github.com/hooklane/hooklane/deploy/testkit"
)

// redisSrv is the package's plain redis-server; the Cluster and Sentinel
// tests start their own.
var redisSrv *deploy.Redis

func TestMain(m *testing.M) { testkit.Main(m, &redisSrv) }
