package receivers

import (
	"net"
	"sync"
)

// PendingPerAddress bounds the connections one remote address may hold open
// before they are admitted (authenticated), so one host opening silent
// connections cannot fill a receiver's connection limit and keep every
// publisher out. Admitted connections do not count.
const PendingPerAddress = 32

// Pending counts, by remote address, the connections a server holds that
// have not been admitted. The zero value is ready; it is safe for
// concurrent use.
type Pending struct {
	mu sync.Mutex
	n  map[string]int
}

// Hold counts c as pending and returns the func that ends its count (call
// it when c is admitted and when it closes; calls after the first do
// nothing), or nil when c's address already holds PendingPerAddress: refuse c.
func (p *Pending) Hold(c net.Conn) func() {
	host, _, _ := net.SplitHostPort(c.RemoteAddr().String())
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.n[host] >= PendingPerAddress {
		return nil
	}
	if p.n == nil {
		p.n = map[string]int{}
	}
	p.n[host]++
	return sync.OnceFunc(func() {
		p.mu.Lock()
		if p.n[host]--; p.n[host] <= 0 {
			delete(p.n, host)
		}
		p.mu.Unlock()
	})
}
