package memory_test

import (
	"fmt"
	"testing"

	"github.com/gobridge/gobridge/stores/memory"
	"github.com/gobridge/gobridge/stores/storetest"
)

func BenchmarkStore_Append(b *testing.B) {
	for _, batch := range []int{1, 100, 1000} {
		b.Run(fmt.Sprintf("batch=%d", batch), func(b *testing.B) {
			storetest.BenchAppend(b, memory.New(memory.Options{}), batch)
		})
	}
}

func BenchmarkStore_ClaimComplete(b *testing.B) {
	storetest.BenchClaimComplete(b, memory.New(memory.Options{}), 10000, 100)
}

func BenchmarkStore_Write(b *testing.B) {
	storetest.BenchWrite(b, memory.New(memory.Options{}), 256)
}
