package tasks_test

import (
	"testing"

	"github.com/hooklane/hooklane/deploy/testkit"
)

func TestMain(m *testing.M) { testkit.Main(m, nil) }
