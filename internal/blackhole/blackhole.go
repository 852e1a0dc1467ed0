// Package blackhole is a loopback TCP proxy for fault tests. It forwards connections to a
// target until it is told to black-hole them; from then on it forwards nothing in either
// direction and keeps every connection open, as a dead NAT entry or a partitioned switch
// leaves a path: no reset, no FIN, writes that succeed locally and replies that never
// come. New connections are accepted and get nothing either. [Proxy.Restore] lets the
// held data through again.
package blackhole

import (
	"net"
	"sync"
	"sync/atomic"
)

// Proxy forwards 127.0.0.1 connections to a target address. Create it with [Start]; all
// its methods are safe for concurrent use.
type Proxy struct {
	ln     net.Listener
	target string

	mu     sync.Mutex
	open   chan struct{} // closed while forwarding; replaced by Blackhole
	closed bool
	conns  map[net.Conn]struct{}
	wg     sync.WaitGroup
	// fresh: connections accepted now are forwarded even while black-holed (RestoreNew).
	fresh bool

	accepted atomic.Int64
}

// Start listens on a free loopback port and forwards each connection to target.
func Start(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{ln: ln, target: target, open: make(chan struct{}), conns: map[net.Conn]struct{}{}}
	close(p.open)
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr is the proxy's host:port.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Port is the proxy's port.
func (p *Proxy) Port() int { return p.ln.Addr().(*net.TCPAddr).Port }

// Accepted returns how many connections the proxy has accepted since it started,
// black-holed or not: a test can wait for its client to have reached it.
func (p *Proxy) Accepted() int { return int(p.accepted.Load()) }

// Blackhole stops forwarding: bytes read from either side are held, not passed on.
func (p *Proxy) Blackhole() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return
	}
	p.fresh = false
	select {
	case <-p.open:
		p.open = make(chan struct{})
	default: // already black-holed
	}
}

// RestoreNew forwards the connections accepted from now on, while those accepted before
// stay held until [Proxy.Restore]: a client whose old connection's reply is stuck reaches
// the server on a new connection first, as when a path comes back for new flows before
// an old one's buffered packets arrive.
func (p *Proxy) RestoreNew() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.fresh = true
}

// Restore forwards again, starting with the bytes held while black-holed.
func (p *Proxy) Restore() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.fresh = false
	select {
	case <-p.open:
	default:
		close(p.open)
	}
}

// Close stops listening, closes every connection and waits for the proxy's goroutines.
func (p *Proxy) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	err := p.ln.Close()
	for c := range p.conns {
		c.Close()
	}
	select {
	case <-p.open:
	default:
		close(p.open) // wake the held copies; they find their connections closed
	}
	p.mu.Unlock()
	p.wg.Wait()
	return err
}

func (p *Proxy) gate() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.open
}

// track registers c, or closes it and reports false if the proxy is closed.
func (p *Proxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		c.Close()
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return
		}
		if !p.track(client) {
			return
		}
		p.accepted.Add(1)
		p.wg.Add(1)
		go p.serve(client)
	}
}

// alwaysOpen is the gate of a connection accepted after RestoreNew.
var alwaysOpen = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

func (p *Proxy) serve(client net.Conn) {
	defer p.wg.Done()
	p.mu.Lock()
	fresh := p.fresh
	p.mu.Unlock()
	gate := p.gate
	if fresh {
		gate = func() <-chan struct{} { return alwaysOpen }
	}
	// A connection accepted while black-holed reaches nothing until restored.
	<-gate()
	server, err := net.Dial("tcp", p.target)
	if err != nil || !p.track(server) {
		client.Close()
		return
	}
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); p.pipe(server, client, gate) }()
	go func() { defer wg.Done(); p.pipe(client, server, gate) }()
	wg.Wait()
	p.mu.Lock()
	delete(p.conns, client)
	delete(p.conns, server)
	p.mu.Unlock()
}

// pipe copies from src to dst, holding each chunk while the proxy is black-holed. When
// either side ends, both are closed.
func (p *Proxy) pipe(dst, src net.Conn, gate func() <-chan struct{}) {
	defer dst.Close()
	defer src.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			<-gate()
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil { // EOF or a closed connection: end both
			return
		}
	}
}
