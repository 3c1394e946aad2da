package lifecycle

// The IPAddress informer lag: each manager replica connects to the API
// server through a lagProxy of its own (environment.Options.
// ReplicaKubeconfig), which passes every request on unchanged but holds
// back what the replica's watches of Cluster API IPAddresses deliver, by
// a delay the test sets and lifts. The replica's view of IPAddresses then
// lags its view of claims and Subnets, which it watches without delay: it
// decides on claims whose addresses it has not seen yet, as an informer
// on a loaded API server or a slow link would make it. The proxy can also
// drop those watches (the events it holds are lost to them; the informer
// watches again from the last revision it saw) and refuse the next one
// with 410 Gone (the informer lists again, as after a compaction).
//
// A proxy in the test rather than a flag of the manager: the manager runs
// as it does in production, its informers and clients unchanged.

import (
	"bufio"
	"errors"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// addressWatchGroup is the API group whose IPAddress watches lag.
const addressWatchGroup = "/apis/ipam.cluster.x-k8s.io/"

// errDropped ends a watch response the proxy dropped.
var errDropped = errors.New("lifecycle: watch dropped by the lag proxy")

// lagProxy is one replica's connection to the API server.
type lagProxy struct {
	listener net.Listener
	server   *http.Server
	rp       *httputil.ReverseProxy

	lag    atomic.Int64 // time.Duration: how long IPAddress watch events are held
	expire atomic.Bool  // refuse the next IPAddress watch with 410 Gone

	mu      sync.Mutex
	streams map[*laggedBody]bool

	// For the summary: IPAddress watches passed on, dropped, refused;
	// chunks of events held back.
	watches, dropped, expired, held atomic.Int64
}

// startLagProxy listens on a free loopback port and passes requests on to
// the API server of cfg with cfg's credentials.
func startLagProxy(cfg *rest.Config) (*lagProxy, error) {
	upstream, err := url.Parse(cfg.Host)
	if err != nil {
		return nil, err
	}
	rt, err := rest.TransportFor(cfg)
	if err != nil {
		return nil, err
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &lagProxy{listener: l, streams: map[*laggedBody]bool{}}
	p.rp = &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(upstream)
			pr.Out.Host = upstream.Host
		},
		Transport:     rt,
		FlushInterval: -1, // watch events as they come (or as they are let go)
		ModifyResponse: func(resp *http.Response) error {
			if resp.StatusCode == http.StatusOK && isAddressWatch(resp.Request) {
				resp.Body = p.hold(resp.Body)
			}
			return nil
		},
		// A dropped watch aborts its response: not worth a log line.
		ErrorLog: log.New(io.Discard, "", 0),
	}
	p.server = &http.Server{Handler: p, ErrorLog: log.New(io.Discard, "", 0), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = p.server.Serve(l) }()
	return p, nil
}

// writeKubeconfig writes a kubeconfig that points at the proxy (plain
// HTTP on loopback; the proxy holds the credentials).
func (p *lagProxy) writeKubeconfig(path string) error {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["lagged"] = &clientcmdapi.Cluster{Server: "http://" + p.listener.Addr().String()}
	cfg.AuthInfos["lagged"] = &clientcmdapi.AuthInfo{}
	cfg.Contexts["lagged"] = &clientcmdapi.Context{Cluster: "lagged", AuthInfo: "lagged"}
	cfg.CurrentContext = "lagged"
	return clientcmd.WriteToFile(*cfg, path)
}

func (p *lagProxy) close() {
	_ = p.server.Close()
	p.drop(false)
}

// setLag sets how long IPAddress watch events are held from now on,
// including those held already (0 lets them all go).
func (p *lagProxy) setLag(d time.Duration) { p.lag.Store(int64(d)) }

func (p *lagProxy) lagNow() time.Duration { return time.Duration(p.lag.Load()) }

// drop ends every IPAddress watch the proxy passes on, with what it holds
// of them undelivered; with expire, the next IPAddress watch is refused
// with 410 Gone, so the informer lists again. It returns how many it
// dropped.
func (p *lagProxy) drop(expire bool) int {
	if expire {
		p.expire.Store(true)
	}
	p.mu.Lock()
	streams := make([]*laggedBody, 0, len(p.streams))
	for b := range p.streams {
		streams = append(streams, b)
	}
	p.mu.Unlock()
	for _, b := range streams {
		b.abort()
	}
	p.dropped.Add(int64(len(streams)))
	return len(streams)
}

func (p *lagProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if isAddressWatch(r) {
		if p.expire.CompareAndSwap(true, false) {
			p.expired.Add(1)
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusGone)
			_, _ = io.WriteString(w, `{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"too old resource version (the lifecycle test's lag proxy)","reason":"Expired","code":410}`)
			return
		}
		p.watches.Add(1)
	}
	p.rp.ServeHTTP(w, r)
}

// isAddressWatch: a watch of Cluster API IPAddresses, in one namespace or
// all (not of IPAddressClaims, nor of networking.k8s.io's IPAddresses).
func isAddressWatch(r *http.Request) bool {
	if r == nil || !strings.HasPrefix(r.URL.Path, addressWatchGroup) {
		return false
	}
	segs := strings.Split(strings.Trim(r.URL.Path, "/"), "/") // apis, group, version, ...
	if len(segs) < 4 {
		return false
	}
	rest, watching := segs[3:], false
	if rest[0] == "watch" {
		rest, watching = rest[1:], true
	}
	if len(rest) >= 2 && rest[0] == "namespaces" {
		rest = rest[2:]
	}
	w := r.URL.Query().Get("watch")
	return len(rest) >= 1 && rest[0] == "ipaddresses" && (watching || w == "true" || w == "1")
}

// laggedBody is a watch response whose bytes are let go only once they
// are lag old (the lag as it is when they are due).
type laggedBody struct {
	p       *lagProxy
	up      io.ReadCloser
	chunks  chan chunk
	aborted chan struct{}
	once    sync.Once
	pending []byte
	err     error
}

type chunk struct {
	data []byte
	at   time.Time
	err  error
}

func (p *lagProxy) hold(up io.ReadCloser) io.ReadCloser {
	b := &laggedBody{p: p, up: up, chunks: make(chan chunk, 1024), aborted: make(chan struct{})}
	p.mu.Lock()
	p.streams[b] = true
	p.mu.Unlock()
	go b.pump()
	return b
}

// pump reads the API server's stream as it comes, stamping each chunk.
func (b *laggedBody) pump() {
	for {
		buf := make([]byte, 32<<10)
		n, err := b.up.Read(buf)
		if n > 0 {
			select {
			case b.chunks <- chunk{data: buf[:n], at: time.Now()}:
			case <-b.aborted:
				return
			}
		}
		if err != nil {
			select {
			case b.chunks <- chunk{err: err, at: time.Now()}:
			case <-b.aborted:
			}
			return
		}
	}
}

func (b *laggedBody) Read(out []byte) (int, error) {
	if len(b.pending) == 0 {
		if b.err != nil {
			return 0, b.err
		}
		var c chunk
		select {
		case c = <-b.chunks:
		case <-b.aborted:
			return 0, errDropped
		}
		if b.p.lagNow() > 0 {
			b.p.held.Add(1)
		}
		// The injected delay: hold the chunk until it is lag old,
		// looking at the lag again now and then, so that lifting it
		// lets go at once.
		for {
			wait := time.Until(c.at.Add(b.p.lagNow()))
			if wait <= 0 {
				break
			}
			t := time.NewTimer(min(wait, 50*time.Millisecond))
			select {
			case <-t.C:
			case <-b.aborted:
				t.Stop()
				return 0, errDropped
			}
		}
		if c.err != nil {
			b.err = c.err
			return 0, c.err
		}
		b.pending = c.data
	}
	n := copy(out, b.pending)
	b.pending = b.pending[n:]
	return n, nil
}

func (b *laggedBody) abort() {
	b.once.Do(func() {
		close(b.aborted)
		b.p.mu.Lock()
		delete(b.p.streams, b)
		b.p.mu.Unlock()
		_ = b.up.Close()
	})
}

func (b *laggedBody) Close() error {
	b.abort()
	return nil
}

// ---- the proxy's own test (no control plane) ----

func TestIsAddressWatch(t *testing.T) {
	for path, want := range map[string]bool{
		"/apis/ipam.cluster.x-k8s.io/v1beta2/ipaddresses?watch=true":                    true,
		"/apis/ipam.cluster.x-k8s.io/v1beta2/namespaces/a/ipaddresses?watch=1":          true,
		"/apis/ipam.cluster.x-k8s.io/v1beta2/watch/namespaces/a/ipaddresses":            true,
		"/apis/ipam.cluster.x-k8s.io/v1beta2/ipaddresses":                               false, // a list
		"/apis/ipam.cluster.x-k8s.io/v1beta2/ipaddressclaims?watch=true":                false,
		"/apis/ipam.cluster.x-k8s.io/v1beta2/namespaces/ipaddresses/subnets?watch=true": false,
		"/apis/networking.k8s.io/v1/ipaddresses?watch=true":                             false,
	} {
		u, _ := url.Parse(path)
		if got := isAddressWatch(&http.Request{URL: u}); got != want {
			t.Errorf("%s: %v, want %v", path, got, want)
		}
	}
}

// The proxy holds an IPAddress watch's events by the lag, lets them go
// when the lag is lifted, drops the watch, and refuses the next with 410.
func TestLagProxy(t *testing.T) {
	sent := make(chan time.Time, 2)
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusOK)
		for _, ev := range []string{`{"type":"ADDED"}` + "\n", `{"type":"MODIFIED"}` + "\n"} {
			_, _ = io.WriteString(w, ev)
			w.(http.Flusher).Flush()
			sent <- time.Now()
		}
		<-r.Context().Done()
	}))
	defer upstream.Close()
	p, err := startLagProxy(&rest.Config{Host: upstream.URL})
	if err != nil {
		t.Fatal(err)
	}
	defer p.close()
	const lag = 400 * time.Millisecond
	p.setLag(lag)
	url := "http://" + p.listener.Addr().String() + "/apis/ipam.cluster.x-k8s.io/v1beta2/namespaces/a/ipaddresses?watch=true"
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(resp.Body)
	if _, err := br.ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	first := <-sent
	if got := time.Since(first); got < lag-20*time.Millisecond {
		t.Errorf("the first event came %s after it was sent, want the lag %s", got, lag)
	}
	if n := p.drop(true); n != 1 {
		t.Errorf("dropped %d watches, want 1", n)
	}
	if _, err := io.ReadAll(br); err == nil {
		t.Error("a dropped watch ended cleanly")
	}
	_ = resp.Body.Close()
	resp, err = http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusGone {
		t.Errorf("the watch after a drop with expire: %d, want 410", resp.StatusCode)
	}
}
