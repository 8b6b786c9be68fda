package main
import (
 _ "github.com/eclipse/paho.mqtt.golang"
 _ "github.com/mochi-mqtt/server/v2"
 _ "github.com/aws/aws-sdk-go-v2/config"
 _ "github.com/aws/aws-sdk-go-v2/service/sqs"
 _ "github.com/aws/aws-sdk-go-v2/service/dynamodb"
 _ "github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
 _ "github.com/aws/smithy-go"
 _ "modernc.org/sqlite"
 _ "gopkg.in/yaml.v3"
 _ "github.com/go-playground/validator/v10"
 _ "github.com/prometheus/client_golang/prometheus"
 _ "github.com/expr-lang/expr"
 _ "golang.org/x/sync/errgroup"
 _ "github.com/google/uuid"
)
func main(){}
