package environment

import (
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
)

// proxy stands in for a Service in front of several manager replicas: it
// passes each TCP connection (TLS is end to end) to the next backend that
// accepts it, round robin.
type proxy struct {
	listener net.Listener
	backends []string
	next     atomic.Uint64
	wg       sync.WaitGroup
}

func startProxy(addr string, backends []string) (*proxy, error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	p := &proxy{listener: l, backends: backends}
	p.wg.Add(1)
	go p.serve()
	return p, nil
}

func (p *proxy) serve() {
	defer p.wg.Done()
	for {
		conn, err := p.listener.Accept()
		if errors.Is(err, net.ErrClosed) {
			return
		}
		if err != nil {
			continue
		}
		go p.forward(conn)
	}
}

// forward connects to the next backend that answers (a stopped replica is
// skipped, as a Service skips a Pod that is not ready) and copies both ways.
func (p *proxy) forward(client net.Conn) {
	defer func() { _ = client.Close() }()
	var backend net.Conn
	for range p.backends {
		addr := p.backends[p.next.Add(1)%uint64(len(p.backends))]
		if c, err := net.Dial("tcp", addr); err == nil {
			backend = c
			break
		}
	}
	if backend == nil {
		return
	}
	defer func() { _ = backend.Close() }()
	done := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(backend, client); done <- struct{}{} }()
	go func() { _, _ = io.Copy(client, backend); done <- struct{}{} }()
	<-done
}

func (p *proxy) close() {
	_ = p.listener.Close()
	p.wg.Wait()
}
