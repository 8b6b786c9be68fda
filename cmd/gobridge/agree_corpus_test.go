package main

// agreeBase is a valid config with every kind of component bridge.New
// builds without the network: the mutations of TestCheckAgreesWithRun
// start from it. %s is the SQLite outbox file.
const agreeBase = `version: 1
bridge:
  id: agree
  admin: {listen: "", token: admin-secret, allowed_hosts: [bridge.local]}
  shutdown_timeout: 5s
  lease_ttl: 15s
  log: {level: info, format: text}
stores:
  outbox: {type: sqlite, options: {path: %q, sync: full, done_retention: 10}}
receivers:
  - id: plant
    type: mqtt
    options:
      broker_urls: ["tcp://127.0.0.1:1"]
      client_id: agree-plant
      username: bridge
      password: pw
      keep_alive: 30s
      connect_timeout: 5s
      max_payload_bytes: 1024
      max_inflight_bytes: 65536
    topics: [{topic: "plant/+/data", qos: 1}]
  - id: edge
    type: mqtt_listener
    options:
      listen: "127.0.0.1:0"
      users: [{username: line, password: pw, publish: ["edge/#"], subscribe: ["cmd/#"]}]
      max_clients: 10
      session_expiry: 1h
    topics: [{topic: "edge/#", qos: 1}]
  - id: web
    type: http_listener
    options:
      listen: "localhost:0"
      token: web-secret
      max_in_flight: 8
      settle_timeout: 5s
      read_timeout: 5s
      write_timeout: 10s
      headers: [X-Plant]
      max_batch_lines: 10
      max_batch_bytes: 4096
    topics: [{topic: "web/#"}]
  - id: held
    type: mqtt
    options: {broker_urls: ["tcp://127.0.0.1:1"], client_id: agree-held}
    topics: [{topic: "held/#", qos: 1}]
senders:
  - id: hook
    type: http
    options:
      url: "http://127.0.0.1:1/in/{topic.1}"
      method: POST
      headers: {X-Source: "{topic}", Authorization: "Bearer t"}
      timeout: 2s
  - id: queue
    type: sqs
    options:
      queue_url: "http://127.0.0.1:1/000000000000/agree.fifo"
      region: us-east-1
      endpoint: "http://127.0.0.1:1"
      message_group_id: "{topic.1}"
      attributes: {machine: "{topic.1}"}
      batch_size: 5
  - id: out
    type: stdout
routes:
  - id: data
    receiver: plant
    topic: "plant/+/data"
    processors:
      - {type: filter, expr: "payload != nil"}
      - {type: transform, expr: "{'v': payload}"}
      - {type: set_headers, headers: {X-Line: "{topic.1}"}}
      - {type: idempotency_key, hash: true}
    sender: hook
    delivery_mode: shared_outbox
    ordering_key: "{topic.1}"
    session: {id: main, partitions: 2, batch_size: 50, drain_interval: 1s}
    policy:
      max_in_flight: 4
      max_outbox_depth: 1000
      max_outbox_bytes: 1048576
      max_dead_letters: 100
      stall_after: 10m
      max_replay_attempts: 3
      replay_budget: 1h
      send_timeout: 5s
      ttl: 24h
      on_expired: dlq
      on_permanent_failure: dlq
      backoff: {initial_interval: 1s, max_interval: 30s, multiplier: 2}
  - id: edge-data
    receiver: edge
    topic: "edge/#"
    processors:
      - {type: idempotency_key, from: "{topic}"}
    sender: queue
    delivery_mode: direct_or_outbox
    ordering_key: "{topic.1}"
    session: {id: edge, drain_strategy: {type: adaptive_backoff, min_interval: 100ms, max_interval: 5s, multiplier: 2}}
    policy: {direct_timeout: 2s}
  - id: posted
    receiver: web
    topic: "web/#"
    processors:
      - {type: coalesce, key: "{topic}"}
    sender: out
    delivery_mode: shared_outbox
    session: {id: web}
  - id: held
    receiver: held
    topic: "held/#"
    sender: out
    delivery_mode: direct_hold
    ack_after: target_accept
`

// agreeValues are the edge values every scalar of agreeBase is set to.
var agreeValues = []string{
	"", "0", "-1", "1", "99999999999999999999", "2.5", "1x", "1ms", "100000h",
	"{nope}", "{topic", "}", " padded ", "a b", "http://", "not a url", "tcp://127.0.0.1:1",
	"127.0.0.1:70000", "localhost:0", "[", "ünï", "http://127.0.0.1:1/000000000000/q",
	"https://sqs.eu-west-1.amazonaws.com/123456789012/q.fifo", "{topic.9}", "{payload.x}",
	"http://127.0.0.1:1/{topic}/../x", "/proc/nope/outbox.db", "true",
}

// agreeEdits are hand-written mutations of agreeBase: a path (as
// routes.Problem paths are written) and the YAML that replaces its value.
var agreeEdits = [][2]string{
	{"receivers[1].id", "plant"},
	{"senders[1].id", "hook"},
	{"routes[1].id", "data"},
	{"routes[3].previous_ids", "[data]"},
	{"routes[0].processors[0].expr", "payload ~~ 1"},
	{"routes[0].processors[0].expr", "nope(1)"},
	{"routes[0].processors[0].expr", "'x' matches '('"},
	{"routes[0].processors[0].expr", "topic matches '(['"},
	{"routes[0].processors[1].expr", "1 +"},
	{"routes[0].processors[1].expr", "unknown_var"},
	{"routes[0].processors[2].headers", "{'bad name': x}"},
	{"routes[0].processors[2].headers", "{X-A: \"a\\nb\"}"},
	{"routes[0].processors[2].headers", "{X-A: \" x\"}"},
	{"routes[0].processors[2].headers", "{Idempotency-Key: x}"},
	{"routes[0].processors[3]", "{type: idempotency_key}"},
	{"routes[0].processors[3]", "{type: idempotency_key, from: '{topic}', hash: true, key: x}"},
	{"routes[0].processors[3]", "{type: coalesce}"},
	{"routes[0].processors[3]", "{type: filter}"},
	{"routes[0].processors[3]", "{type: filter, expr: '1'}"},
	{"routes[0].processors[3]", "{type: transform, expr: 'nil'}"},
	{"senders[0].options.headers", "{'X Bad': x}"},
	{"senders[0].options.headers", "{Host: '{topic}'}"},
	{"senders[0].options.headers", "{X-A: \"a\\u0001b\"}"},
	{"senders[0].options.headers", "{X-A: '{nope}'}"},
	{"senders[0].options.headers_file", "{X-A: /nonexistent/token}"},
	{"senders[0].options.url", "'http://127.0.0.1:1/{payload.x}'"},
	{"senders[0].options.url", "'http://{topic}/x'"},
	{"senders[0].options.url", "'http://127.0.0.1:1/a%zz'"},
	{"senders[0].options.url", "'http://127.0.0.1:1/{topic.1'"},
	{"senders[0].options.url", "'http://user:pw@127.0.0.1:1/x'"},
	{"senders[0].options.url", "'https://127.0.0.1:1/x?a={topic}'"},
	{"senders[0].options.tls", "{ca_file: /nonexistent/ca.pem}"},
	{"senders[0].options.tls", "{cert_file: /nonexistent/c.pem, key_file: /nonexistent/k.pem}"},
	{"senders[0].options.tls", "{server_name: x, insecure_skip_verify: true}"},
	{"senders[1].options.attributes", "{'bad name': x}"},
	{"senders[1].options.attributes", "{AWS.x: x}"},
	{"senders[1].options.attributes", "{gobridge_id: x}"},
	{"senders[1].options.attributes", "{a1: x, a2: x, a3: x, a4: x, a5: x, a6: x, a7: x, a8: x, a9: x, a10: x}"},
	{"senders[1].options.attributes", "{x: ''}"},
	{"senders[1].options.attributes", "{.x: a}"},
	{"senders[1].options.attributes", "{x..y: a}"},
	{"senders[1].options.attributes", "{x: '{nope}'}"},
	{"senders[1].options.queue_url", "http://127.0.0.1:1/000000000000/agree"},
	{"senders[1].options.queue_url", "agree.fifo"},
	{"senders[1].options.queue_url", "https://sqs.eu-west-1.amazonaws.com/agree.fifo"},
	{"senders[1].options.message_group_id", "''"},
	{"senders[1].options.region", "''"},
	{"senders[1].options.endpoint", "'not a url'"},
	{"senders[1].options.endpoint", "'127.0.0.1:1'"},
	{"receivers[0].options.broker_urls", "['tcp://127.0.0.1:1', 'http://x']"},
	{"receivers[0].options.broker_urls", "['tcp://[::1']"},
	{"receivers[0].options.broker_urls", "['127.0.0.1:1883']"},
	{"receivers[0].options.tls", "{ca_file: /nonexistent/ca.pem}"},
	{"receivers[0].topics", "[{topic: 'plant/+/data', qos: 3}]"},
	{"receivers[0].topics", "[{topic: 'plant/#/x'}]"},
	{"receivers[0].topics", "[]"},
	{"receivers[1].options.users", "[{username: line, password_hash: nohash}]"},
	{"receivers[1].options.users", "[{username: line, password: pw}, {username: line, password: pw2}]"},
	{"receivers[1].options.users", "[{username: '', password: pw}]"},
	{"receivers[1].options.users", "[{username: line, password: pw, publish: ['a/#/b']}]"},
	{"receivers[1].options.users", "[{username: line, password_file: /nonexistent/pw}]"},
	{"receivers[1].options.anonymous", "{publish: ['edge/#']}"},
	{"receivers[1].options.tls", "{cert_file: /nonexistent/c.pem, key_file: /nonexistent/k.pem}"},
	{"receivers[1].options.tls", "{client_ca_file: /nonexistent/ca.pem}"},
	{"receivers[2].options.listen", "'127.0.0.1:0'"},
	{"receivers[2].options.listen", "'[::1]:0'"},
	{"receivers[2].options.token_file", "/nonexistent/token"},
	{"receivers[2].options.headers", "['bad name']"},
	{"receivers[2].options.headers", "['']"},
	{"receivers[2].options.tls", "{cert_file: /nonexistent/c.pem, key_file: /nonexistent/k.pem}"},
	{"receivers[2].topics", "[{topic: 'web/#', qos: 2}]"},
	{"routes[0].session", "{id: main, partitions: 3}"},
	{"routes[0].session.drain_strategy", "{type: fixed_poll, interval: 1s}"},
	{"routes[1].session", "{id: main}"},
	{"routes[1].ack_after", "target_accept"},
	{"routes[3].delivery_mode", "shared_outbox"},
	{"routes[3].session", "{id: main}"},
	{"routes[0].policy.backoff", "{initial_interval: 1m, max_interval: 1s}"},
	{"routes[0].policy.send_timeout", "1h"},
	{"routes[0].topic", "'other/#'"},
	{"routes[0].receiver", "nope"},
	{"routes[0].sender", "nope"},
	{"stores.outbox", "{type: memory}"},
	{"stores.outbox", "{type: sqlite, options: {path: /proc/nope/outbox.db}}"},
	{"stores.outbox", "{type: sqlite, options: {path: /dev/null}}"},
	{"stores.outbox", "{type: sqlite, options: {path: ''}}"},
	{"stores", "{}"},
	{"bridge.admin.listen", "'127.0.0.1:0'"},
	{"bridge.admin.listen", "'localhost:0'"},
	{"bridge.admin.listen", "'127.0.0.1:99999'"},
	{"bridge.admin.listen", "'nohost.invalid:0'"},
	{"bridge.admin.listen", "'256.0.0.1:0'"},
	{"bridge.admin.token", "' spaced '"},
	{"bridge.admin.token_file", "/nonexistent/token"},
	{"bridge.admin.allowed_hosts", "['a b', '']"},
	{"bridge.lease_ttl", "1s"},
}
