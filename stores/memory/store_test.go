package memory_test

import (
	"testing"

	"github.com/gobridge/gobridge/stores"
	"github.com/gobridge/gobridge/stores/memory"
	"github.com/gobridge/gobridge/stores/storetest"
)

func TestStore_Conformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) stores.Store {
		s := memory.New()
		t.Cleanup(func() { _ = s.Close() })
		return s
	})
}

func TestLeases_Conformance(t *testing.T) {
	storetest.RunLeases(t, func(t *testing.T) stores.Leases {
		l := memory.NewLeases()
		t.Cleanup(func() { _ = l.Close() })
		return l
	})
}
