package dynamodb_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsddb "github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/gobridge/gobridge/stores"
	"github.com/gobridge/gobridge/stores/dynamodb"
	"github.com/gobridge/gobridge/stores/memory"
	"github.com/gobridge/gobridge/stores/storetest"
)

// FuzzStore_MatchesMemory drives the DynamoDB store and the memory store
// (the reference) through the same random operations and fails on the
// first answer that differs (storetest.Diff). DynamoDB's Seqs are a
// counter per partition, not dense (storetest.DiffEnv.Sparse); a reopen is another
// process's view of the table, which keeps the leases.
//
// The inputs a fuzzing process runs share one table, one Store and one
// reference (fresh ones every 20 inputs), each input with a session and
// routes of its own: DynamoDB Local is slow and shared. Run it with
// -parallel 1 or 2.
func FuzzStore_MatchesMemory(f *testing.F) {
	for _, seed := range storetest.DiffSeeds {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, ops []byte) {
		storetest.Diff(t, diffEnv(t), ops)
	})
}

// TestStore_MatchesMemory runs the differential test on the seeds and on
// 200 inputs of 20 to 80 random bytes, the same at every run.
func TestStore_MatchesMemory(t *testing.T) {
	inputs := slices.Clone(storetest.DiffSeeds)
	rng := rand.New(rand.NewPCG(20261202, 1))
	for range 200 {
		ops := make([]byte, 20+rng.IntN(61))
		for i := range ops {
			ops[i] = byte(rng.Uint32())
		}
		inputs = append(inputs, ops)
	}
	for i, ops := range inputs {
		if !t.Run(fmt.Sprint(i), func(t *testing.T) { storetest.Diff(t, diffEnv(t), ops) }) {
			t.Fatalf("input %d: %x", i, ops)
		}
	}
}

// env is the differential test's stores, shared by the process's inputs;
// envTable is its table, a fresh one every 20 inputs (Stats reads every
// session of the table that has records), envClient their client.
var (
	env       *storetest.DiffEnv
	envTable  string
	envClient *awsddb.Client
)

func diffEnv(t *testing.T) *storetest.DiffEnv {
	if env != nil && env.Inputs%20 != 0 {
		return env
	}
	dropDiffTable()
	c := newClient(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	table := uniqueName("gobridge_diff_")
	if err := dynamodb.CreateTable(ctx, c, table); err != nil {
		t.Fatalf("create table: %v", err)
	}
	envTable, envClient = table, c
	e := &storetest.DiffEnv{Name: "dynamodb", Time: time.Now().Truncate(time.Millisecond).UTC(),
		Sparse: true, Prefix: uniqueName("") + "-"}
	if env != nil {
		e.Inputs = env.Inputs
	}
	e.Ref = memory.New(memory.Options{Now: e.Now})
	e.Reopen = func(t *testing.T) stores.Store {
		if e.Store != nil {
			_ = e.Store.Close()
		}
		s, err := dynamodb.Open(context.Background(), dynamodb.Options{Table: table, Client: c, Now: e.Now})
		if err != nil {
			t.Fatalf("Open: %v", err)
		}
		return s
	}
	e.Store = e.Reopen(t)
	env = e
	return e
}

// dropDiffTable deletes the differential test's table, if any.
func dropDiffTable() {
	if envTable == "" {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	_, _ = envClient.DeleteTable(ctx, &awsddb.DeleteTableInput{TableName: aws.String(envTable)})
	cancel()
	envTable = ""
}
