package netpoll_test

import (
	"bufio"
	"fmt"
	"io"
	"log"
	"net/http"
	"sync"

	"github.com/edgepoll/edgepoll/netpoll"
)

// An http.Server on netpoll's listener: net/http, crypto/tls and HTTP/2
// run on it unchanged.
func ExampleListen() {
	l, err := netpoll.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "hello, %s\n", r.URL.Path[1:])
	})}
	go srv.Serve(l)
	defer srv.Close()

	resp, err := http.Get("http://" + l.Addr().String() + "/gopher")
	if err != nil {
		log.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Print(string(body))
	// Output: hello, gopher
}

// A goroutine per connection that holds a buffer only while there is
// something to read: WaitRead parks with no buffer, and the buffer comes
// from a pool shared by every connection.
func ExampleConn_WaitRead() {
	l, err := netpoll.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	defer l.Close()
	pool := sync.Pool{New: func() any { return new([4096]byte) }}
	go func() {
		for {
			c, err := l.AcceptConn()
			if err != nil {
				return // l closed
			}
			go func() {
				defer c.Close()
				for {
					if err := c.WaitRead(); err != nil {
						return
					}
					buf := pool.Get().(*[4096]byte)
					n, err := c.Read(buf[:])
					if n > 0 {
						_, err = c.Write(buf[:n])
					}
					pool.Put(buf)
					if err != nil {
						return // io.EOF when the peer is done
					}
				}
			}()
		}
	}()

	c, err := netpoll.Dial("tcp", l.Addr().String())
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	r := bufio.NewReader(c)
	for _, msg := range []string{"ping", "pong"} {
		fmt.Fprintln(c, msg)
		echo, err := r.ReadString('\n')
		if err != nil {
			log.Fatal(err)
		}
		fmt.Print(echo)
	}
	// Output:
	// ping
	// pong
}
