package netpoll_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

const (
	httpRequests = 1000
	httpClients  = 10
)

// TestHTTPServer serves net/http on our listener and checks 1,000 requests
// from the stdlib client over keep-alive connections, in every mode.
func TestHTTPServer(t *testing.T) {
	for _, mode := range modes {
		t.Run("mode="+mode, func(t *testing.T) {
			g := newGroup(t, cfgOf(t, "mode="+mode))
			l := listen(t, g, "tcp")
			conns := serveHTTP(t, l)
			// At most httpClients conns: a conn the server broke would need a new one.
			tr := &http.Transport{MaxIdleConnsPerHost: httpClients, MaxConnsPerHost: httpClients}
			defer tr.CloseIdleConnections()
			hammer(t, &http.Client{Transport: tr}, "http://"+l.Addr().String(), 1)
			if n := conns.Load(); n < 1 || n > httpClients {
				t.Errorf("server saw %d connections for %d keep-alive clients", n, httpClients)
			}
		})
	}
}

// TestHTTP2OverTLS wraps our listener in tls.NewListener and checks that the
// stdlib client negotiates HTTP/2 by ALPN and gets correct answers.
func TestHTTP2OverTLS(t *testing.T) {
	for _, mode := range modes {
		t.Run("mode="+mode, func(t *testing.T) {
			g := newGroup(t, cfgOf(t, "mode="+mode))
			cert, pool := selfSigned(t)
			l := tls.NewListener(listen(t, g, "tcp"), &tls.Config{
				Certificates: []tls.Certificate{cert},
				NextProtos:   []string{"h2", "http/1.1"},
			})
			conns := serveHTTP(t, l)
			tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}, ForceAttemptHTTP2: true}
			defer tr.CloseIdleConnections()
			// One request first: concurrent first requests would each dial
			// before the client learns the server speaks HTTP/2.
			c := &http.Client{Transport: tr}
			resp, err := c.Get("https://" + l.Addr().String() + "/warm-up")
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			hammer(t, c, "https://"+l.Addr().String(), 2)
			if n := conns.Load(); n != 1 {
				t.Errorf("HTTP/2 used %d connections, want 1 multiplexed", n)
			}
		})
	}
}

// serveHTTP serves a handler that answers /n with a body derived from n,
// and returns a count of the connections the server saw.
func serveHTTP(t *testing.T, l net.Listener) *atomic.Int64 {
	t.Helper()
	var conns atomic.Int64
	srv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			io.WriteString(w, body(r.URL.Path))
		}),
		ConnState: func(_ net.Conn, s http.ConnState) {
			if s == http.StateNew {
				conns.Add(1)
			}
		},
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(l) }()
	t.Cleanup(func() {
		srv.Close()
		if err := <-done; err != http.ErrServerClosed {
			t.Errorf("Serve returned %v, want http.ErrServerClosed", err)
		}
	})
	return &conns
}

func body(path string) string { return "hello " + path + " " + fmt.Sprint(len(path)*7919) }

// hammer sends httpRequests requests from httpClients goroutines and checks
// every status, protocol and body.
func hammer(t *testing.T, c *http.Client, base string, protoMajor int) {
	t.Helper()
	c.Timeout = 30 * time.Second
	var wg sync.WaitGroup
	var ok atomic.Int64
	for w := range httpClients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < httpRequests; i += httpClients {
				path := fmt.Sprintf("/req/%d", i)
				resp, err := c.Get(base + path)
				if err != nil {
					t.Errorf("GET %s: %v", path, err)
					return
				}
				b, err := io.ReadAll(resp.Body)
				resp.Body.Close()
				switch {
				case err != nil:
					t.Errorf("GET %s: reading body: %v", path, err)
				case resp.StatusCode != 200 || resp.ProtoMajor != protoMajor:
					t.Errorf("GET %s: %s %s, want 200 over HTTP/%d", path, resp.Proto, resp.Status, protoMajor)
				case string(b) != body(path):
					t.Errorf("GET %s: body %q, want %q", path, b, body(path))
				default:
					ok.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	if ok.Load() != httpRequests {
		t.Fatalf("%d of %d requests answered correctly", ok.Load(), httpRequests)
	}
}

// selfSigned makes a certificate for 127.0.0.1 and a pool that trusts it.
func selfSigned(t *testing.T) (tls.Certificate, *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: "netpoll test"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IsCA:         true, BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(leaf)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}, pool
}
