package bench

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"testing"
)

var plaintext = []byte("Hello, World!")

// BenchmarkHTTP measures keep-alive GET /plaintext through net/http, server
// and client on the same implementation: conns clients, one request in
// flight each.
func BenchmarkHTTP(b *testing.B) {
	for _, mk := range impls(b) {
		im := mk()
		for _, conns := range []int{1, 50} {
			b.Run(fmt.Sprintf("%s/conns=%d", im.name, conns), func(b *testing.B) {
				httpPlaintext(b, im, conns)
			})
		}
		im.close()
	}
}

func httpPlaintext(b *testing.B, im impl, conns int) {
	l, err := im.listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		w.Write(plaintext)
	})}
	go srv.Serve(l)
	defer srv.Close()
	tr := &http.Transport{
		DialContext:         func(ctx context.Context, network, addr string) (net.Conn, error) { return im.dial(ctx, network, addr) },
		MaxIdleConnsPerHost: conns,
		MaxConnsPerHost:     conns,
	}
	defer tr.CloseIdleConnections()
	c := &http.Client{Transport: tr}
	url := "http://" + l.Addr().String() + "/plaintext"
	get := func() error {
		resp, err := c.Get(url)
		if err != nil {
			return err
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err == nil && (resp.StatusCode != 200 || string(body) != string(plaintext)) {
			err = fmt.Errorf("GET: %s %q", resp.Status, body)
		}
		return err
	}
	for range conns { // warm the connections up
		if err := get(); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	m := startMeter(b, im)
	lat, err := parallel(b, conns, func(int) func() error { return get })
	m.report(b)
	reportLatency(b, lat)
	if err != nil {
		b.Fatal(err)
	}
}
