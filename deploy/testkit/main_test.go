package testkit_test

import (
	"testing"

	"github.com/hooklane/hooklane/deploy"
	"github.com/hooklane/hooklane/deploy/testkit"
)

var redisSrv *deploy.Redis

func TestMain(m *testing.M) { testkit.Main(m, &redisSrv) }
