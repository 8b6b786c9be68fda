package listener

import (
	"encoding/binary"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/gobridge/gobridge/receivers/internal/testsink"
)

// connect311 is an MQTT 3.1.1 CONNECT (clean session, keep-alive 60 s,
// no credentials) with the given client ID.
func connect311(clientID string) []byte {
	body := []byte{0, 4, 'M', 'Q', 'T', 'T', 4, 0x02, 0, 60}
	body = binary.BigEndian.AppendUint16(body, uint16(len(clientID)))
	body = append(body, clientID...)
	return append(append([]byte{0x10}, remainingLength(len(body))...), body...)
}

// TestListener_RefusesAnOversizedConnect: a first packet that announces
// more than MaxConnectBytes (here 300 KB, under the hard packet limit, sent
// a byte at a time after its header) closes the connection at once, not
// after connect_timeout: mochi would allocate the whole announced length
// for every such connection before any authentication. A CONNECT just
// under the limit is served.
func TestListener_RefusesAnOversizedConnect(t *testing.T) {
	t.Parallel()
	b := setup(t, testsink.New(true), func(o *Options) { o.ConnectTimeout = 5 * time.Minute })
	addr := strings.TrimPrefix(b.url, "tcp://")

	big, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer big.Close()
	for _, part := range [][]byte{{0x10}, remainingLength(300_000), {0, 4}} { // the header split across reads
		if _, err := big.Write(part); err != nil {
			t.Fatal(err)
		}
	}
	closedByServer(t, big) // within 10 s, long before connect_timeout

	ok, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer ok.Close()
	if _, err := ok.Write(connect311(strings.Repeat("c", MaxConnectBytes-20))); err != nil {
		t.Fatal(err)
	}
	connack := make([]byte, 4)
	_ = ok.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.ReadFull(ok, connack); err != nil || connack[0] != 0x20 || connack[3] != 0 {
		t.Fatalf("CONNACK for a CONNECT of %d bytes: %x, %v", MaxConnectBytes-8, connack, err)
	}
}
