package testservices

import (
	"context"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
)

// DropTablesAtCleanup deletes the DynamoDB tables at endpoint (DynamoDB
// Local) when t ends, whether or not they were created; register it before
// what creates them, so that it runs after what closes them.
func DropTablesAtCleanup(t testing.TB, endpoint string, tables ...string) {
	t.Helper()
	// DynamoDB Local wants credentials; any will do.
	client := dynamodb.New(dynamodb.Options{Region: "us-east-1", BaseEndpoint: aws.String(endpoint),
		Credentials: aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
			return aws.Credentials{AccessKeyID: "test", SecretAccessKey: "test"}, nil
		})})
	t.Cleanup(func() {
		// t.Context() is already cancelled when cleanups run.
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		for _, table := range tables {
			if _, err := client.DeleteTable(ctx, &dynamodb.DeleteTableInput{TableName: aws.String(table)}); err != nil {
				t.Logf("delete table %s: %v", table, err)
			}
		}
	})
}
