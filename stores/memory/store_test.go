package memory_test

import (
	"testing"

	"github.com/gobridge/gobridge/stores"
	"github.com/gobridge/gobridge/stores/memory"
	"github.com/gobridge/gobridge/stores/storetest"
)

func TestStore(t *testing.T) {
	t.Parallel()
	storetest.Run(t, storetest.Features{}, func(t *testing.T) stores.Store { return memory.New(memory.Options{}) })
}
