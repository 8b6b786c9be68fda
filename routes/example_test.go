package routes_test

import (
	"fmt"
	"os"
	"strings"

	"github.com/gobridge/gobridge/routes"
)

func ExampleParse() {
	const blueprint = `version: 1
bridge:
  id: line-7
receivers:
  - id: edge
    type: mqtt_listener
    options: {allow_anonymous: true}
    topics:
      - topic: "factory/#"
senders:
  - id: out
    type: stdout
routes:
  - id: telemetry
    receiver: edge
    topic: factory/+/telemetry
    sender: out
    policy:
      send_timeout: 5
      on_permanent_failure: drop
      on_expired: drop
`
	cfg, problems, err := routes.Parse(strings.NewReader(blueprint), "line-7.yaml")
	if err != nil {
		fmt.Println(err) // only I/O errors
		return
	}
	_ = problems.WriteText(os.Stdout)
	fmt.Println(problems.HasErrors(), cfg.Routes[0].DeliveryMode, cfg.Routes[0].AckAfter)
	// Output:
	// line-7.yaml:19:21: duration: routes[0].policy.send_timeout: "5" has no unit; write a duration such as "5s"
	// true direct_hold target_accept
}
