package netpoll_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/edgepoll/edgepoll/netpoll"
	"golang.org/x/sys/unix"
)

const (
	kib = 1 << 10
	mib = 1 << 20
)

// writeFile writes b to a new file in t's temp dir and returns its path.
func writeFile(t testing.TB, name string, b []byte) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// fileMux serves path's directory with http.FileServer under /fs/ and the
// file with http.ServeContent under /sc.
func fileMux(path string) *http.ServeMux {
	mux := http.NewServeMux()
	mux.Handle("/fs/", http.StripPrefix("/fs/", http.FileServer(http.Dir(filepath.Dir(path)))))
	mux.HandleFunc("/sc", func(w http.ResponseWriter, r *http.Request) {
		f, err := os.Open(path)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		defer f.Close()
		http.ServeContent(w, r, "payload.bin", time.Time{}, f)
	})
	return mux
}

// fileServer serves fileMux(path) on l until the test ends.
func fileServer(t testing.TB, l net.Listener, path string) {
	t.Helper()
	srv := &http.Server{Handler: fileMux(path)}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
}

// get fetches url and returns the body's length and SHA-256.
func get(t testing.TB, client *http.Client, url string) (int64, [32]byte) {
	t.Helper()
	resp, err := client.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s", url, resp.Status)
	}
	h := sha256.New()
	n, err := io.Copy(h, resp.Body)
	if err != nil {
		t.Fatalf("GET %s: body after %d bytes: %v", url, n, err)
	}
	var sum [32]byte
	h.Sum(sum[:0])
	return n, sum
}

// sniffLen is what net/http's response.ReadFrom copies itself before it
// hands the rest of the body to the connection's ReadFrom.
const sniffLen = 512

// TestFileServerSendfile serves a 1 MiB and a 64 MiB file with
// http.FileServer and http.ServeContent on our listener, in every mode, and
// checks that the bodies are byte-identical and that all but net/http's
// first 512 bytes went by sendfile, counted by Stats.
func TestFileServerSendfile(t *testing.T) {
	for _, size := range []int{1 * mib, 64 * mib} {
		data := randomBytes(size, uint64(size))
		want := sha256.Sum256(data)
		path := writeFile(t, "payload.bin", data)
		for _, mode := range modes {
			t.Run(fmt.Sprintf("size=%dMiB/mode=%v", size/mib, mode), func(t *testing.T) {
				g := newGroup(t, cfgOf(t, "mode="+mode))
				l := listen(t, g, "tcp")
				fileServer(t, l, path)
				tr := &http.Transport{}
				defer tr.CloseIdleConnections()
				client := &http.Client{Transport: tr}
				for i, url := range []string{"/fs/payload.bin", "/sc"} {
					before := netpoll.Counters(g).Total
					n, sum := get(t, client, "http://"+l.Addr().String()+url)
					if n != int64(size) || sum != want {
						t.Fatalf("%s: %d bytes, sha256 %x; want %d bytes, %x", url, n, sum[:8], size, want[:8])
					}
					// The handler adds to Stats when its ReadFrom returns,
					// which may be after the client has the last byte.
					want := before.SendfileBytes + uint64(size-sniffLen)
					done, expired := watchdog(t, 30*time.Second)
					await(expired, func() bool { return netpoll.Counters(g).Total.SendfileBytes >= want })
					done()
					st := netpoll.Counters(g).Total
					if got := st.SendfileBytes - before.SendfileBytes; got != uint64(size-sniffLen) {
						t.Errorf("%s (request %d): %d bytes by sendfile, want %d", url, i, got, size-sniffLen)
					}
					if st.Sendfiles == before.Sendfiles {
						t.Errorf("%s: no sendfile call counted", url)
					}
				}
			})
		}
	}
}

// TestFileServerSendfileKernel counts the server's sendfile calls and bytes
// the kernel saw, with strace, in a child process serving the 64 MiB file.
func TestFileServerSendfileKernel(t *testing.T) {
	if os.Getenv("NETPOLL_TEST_FILESERVER") != "" {
		fileServerChild()
		return
	}
	strace, err := exec.LookPath("strace")
	if err != nil {
		missing(t, "strace", err)
	}
	const size = 64 * mib
	path := writeFile(t, "payload.bin", randomBytes(size, 7))
	trace := filepath.Join(t.TempDir(), "strace.out")
	// -ff: one file per thread, so no call is split across lines.
	cmd := exec.Command(strace, "-ff", "-qq", "-e", "trace=sendfile", "-o", trace,
		os.Args[0], "-test.run=^TestFileServerSendfileKernel$")
	cmd.Env = append(os.Environ(), "NETPOLL_TEST_FILESERVER="+path)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	addr, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		t.Fatalf("child's address: %v", err)
	}
	addr = strings.TrimSpace(addr)
	tr := &http.Transport{}
	client := &http.Client{Transport: tr}
	for _, url := range []string{"/fs/payload.bin", "/sc"} {
		if n, _ := get(t, client, "http://"+addr+url); n != size {
			t.Fatalf("%s: %d bytes, want %d", url, n, size)
		}
	}
	// On the same keep-alive connection: the server reads this request
	// only after the last handler returned and counted its sendfiles.
	resp, err := client.Get("http://" + addr + "/stats")
	if err != nil {
		t.Fatal(err)
	}
	statsLine, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	tr.CloseIdleConnections()
	if err := cmd.Wait(); err != nil {
		t.Fatalf("child: %v", err)
	}
	files, err := filepath.Glob(trace + ".*")
	if err != nil || len(files) == 0 {
		t.Fatalf("no strace output (%v)", err)
	}
	calls, bytes := 0, 0
	re := regexp.MustCompile(`sendfile\(\d+, \d+, NULL, \d+\)\s+= (-?\d+)`)
	for _, f := range files {
		out, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range re.FindAllSubmatch(out, -1) {
			calls++
			if n, _ := strconv.Atoi(string(m[1])); n > 0 {
				bytes += n
			}
		}
	}
	if want := 2 * (size - sniffLen); bytes != want {
		t.Errorf("kernel: %d sendfile calls sent %d bytes, want %d", calls, bytes, want)
	}
	if want := fmt.Sprintf("sendfiles=%d bytes=%d", calls, bytes); string(statsLine) != want {
		t.Errorf("Stats says %q, the kernel %q", statsLine, want)
	}
	t.Logf("kernel: %d sendfile calls, %d bytes for 2 x %d MiB", calls, bytes, size/mib)
}

// fileServerChild serves NETPOLL_TEST_FILESERVER on a netpoll listener,
// prints its address, answers /stats with its sendfile counts and exits.
func fileServerChild() {
	fail := func(err error) {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	g, err := netpoll.New(netpoll.Config{})
	if err != nil {
		fail(err)
	}
	l, err := g.Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		fail(err)
	}
	done := make(chan struct{})
	mux := fileMux(os.Getenv("NETPOLL_TEST_FILESERVER"))
	mux.HandleFunc("/stats", func(w http.ResponseWriter, r *http.Request) {
		st := netpoll.Counters(g).Total
		fmt.Fprintf(w, "sendfiles=%d bytes=%d", st.Sendfiles, st.SendfileBytes)
		close(done)
	})
	srv := &http.Server{Handler: mux}
	go srv.Serve(l)
	fmt.Println(l.Addr())
	<-done
	if err := srv.Shutdown(context.Background()); err != nil {
		fail(err)
	}
	g.Close()
	os.Exit(0)
}

// connPair returns both ends of a connection: the client on dial (ours or
// package net's), the server accepted on g's listener l.
func connPair(t testing.TB, g *netpoll.Group, l net.Listener, ours bool) (client, server net.Conn) {
	t.Helper()
	if ours {
		return pipe(t, g, l)
	}
	return stdPipe(t, l)
}

// TestSpliceProxy proxies a stream through io.Copy between two
// connections, with the proxy's ends ours or package net's, and checks it
// arrives intact and was spliced: 64 MiB over TCP between two netpoll
// conns in every mode, 8 MiB for the other shapes.
func TestSpliceProxy(t *testing.T) {
	type shape struct {
		name     string
		network  string
		size     int
		srcOurs  bool // the proxy's reading end
		dstOurs  bool // the proxy's writing end
		limit    bool // io.LimitedReader around the source, cut at size
		readFrom bool // call the destination's ReadFrom instead of io.Copy
	}
	shapes := []shape{
		{name: "ours-ours", network: "tcp", size: 64 * mib, srcOurs: true, dstOurs: true},
		{name: "ours-ours-unix", network: "unix", size: 8 * mib, srcOurs: true, dstOurs: true},
		// Not io.Copy: it would call net's TCPConn.WriteTo, which hands
		// ReadFrom a wrapper type of net's own that only net can unwrap.
		{name: "net-ours", network: "tcp", size: 8 * mib, dstOurs: true, readFrom: true},
		{name: "net-ours-unix", network: "unix", size: 8 * mib, dstOurs: true, readFrom: true},
		{name: "ours-net", network: "tcp", size: 8 * mib, srcOurs: true},
		{name: "ours-net-unix", network: "unix", size: 8 * mib, srcOurs: true},
		{name: "limited", network: "tcp", size: 8 * mib, srcOurs: true, dstOurs: true, limit: true},
	}
	for _, mode := range modes {
		for _, sh := range shapes {
			if sh.size > 8*mib && mode != "et" && testing.Short() {
				continue
			}
			t.Run(fmt.Sprintf("mode=%v/%s", mode, sh.name), func(t *testing.T) {
				done, expired := watchdog(t, 2*time.Minute)
				defer done()
				g := newGroup(t, cfgOf(t, "mode="+mode))
				// in: sender -> proxy's src; out: proxy's dst -> receiver.
				lin := listen(t, g, sh.network)
				sender, src := connPair(t, g, lin, true)
				if !sh.srcOurs {
					var err error
					if src, err = net.Dial(sh.network, lin.Addr().String()); err != nil {
						t.Fatal(err)
					}
					t.Cleanup(func() { src.Close() })
					if sender, err = lin.Accept(); err != nil {
						t.Fatal(err)
					}
					t.Cleanup(func() { sender.Close() })
				}
				lout := listen(t, g, sh.network)
				dst, receiver := connPair(t, g, lout, sh.dstOurs)
				if !sh.dstOurs {
					// dst must be net's: stdPipe dialed with net and accepted ours.
					receiver, dst = dst, receiver
				}
				data := randomBytes(sh.size, 3)
				extra := []byte("after the limit")
				go func() {
					sender.Write(data)
					if sh.limit {
						sender.Write(extra)
					}
					sender.(interface{ CloseWrite() error }).CloseWrite()
				}()
				var r io.Reader = src
				if sh.limit {
					r = &io.LimitedReader{R: src, N: int64(sh.size)}
				}
				copied := make(chan error, 1)
				go func() {
					var n int64
					var err error
					if sh.readFrom {
						n, err = dst.(io.ReaderFrom).ReadFrom(r)
					} else {
						n, err = io.Copy(dst, r)
					}
					if err == nil && n != int64(sh.size) {
						err = fmt.Errorf("io.Copy moved %d bytes, want %d", n, sh.size)
					}
					if err == nil {
						err = dst.(interface{ CloseWrite() error }).CloseWrite()
					}
					copied <- err
				}()
				got := sha256.New()
				n, err := io.Copy(got, receiver)
				if err != nil {
					t.Fatalf("receiver: %v after %d bytes", err, n)
				}
				select {
				case err := <-copied:
					if err != nil {
						t.Fatalf("proxy: %v", err)
					}
				case <-expired:
					t.Fatal("proxy did not finish")
				}
				if want := sha256.Sum256(data); n != int64(sh.size) || !bytesEqual(got.Sum(nil), want[:]) {
					t.Fatalf("receiver got %d bytes, sha256 %x; want %d, %x", n, got.Sum(nil)[:8], sh.size, want[:8])
				}
				if sh.limit {
					rest, err := io.ReadAll(src)
					if err != nil || string(rest) != string(extra) {
						t.Fatalf("after the limit the source reads %q, %v; want %q", rest, err, extra)
					}
				}
				st := netpoll.Counters(g).Total
				if st.SpliceBytes != uint64(sh.size) || st.Splices == 0 {
					t.Errorf("Stats: %d splice calls moved %d bytes, want %d bytes", st.Splices, st.SpliceBytes, sh.size)
				}
				if st.SendfileBytes != 0 {
					t.Errorf("Stats: %d bytes by sendfile in a proxy", st.SendfileBytes)
				}
			})
		}
	}
}

func bytesEqual(a, b []byte) bool { return string(a) == string(b) }

// fillUntilParked starts op (a ReadFrom or WriteTo on c) in a goroutine and
// waits until it is parked in dir ("read" or "write"); it returns op's
// result channel.
func parkedOp(t *testing.T, c net.Conn, dir string, stop <-chan struct{}, op func() (int64, error)) <-chan error {
	t.Helper()
	res := make(chan error, 1)
	go func() {
		_, err := op()
		res <- err
	}()
	await := netpoll.AwaitWriteState
	if dir == "read" {
		await = netpoll.AwaitReadState
	}
	if !await(c, "waiting", stop) {
		t.Fatalf("%s never parked", dir)
	}
	return res
}

// TestZeroCopyParkedRelease parks a sendfile (the peer does not read) and
// a splice (the source is empty), then releases each with Close and with a
// deadline, and checks the error each returns.
func TestZeroCopyParkedRelease(t *testing.T) {
	path := writeFile(t, "big.bin", randomBytes(64*mib, 5))
	for _, mode := range modes {
		for _, how := range []string{"close", "deadline"} {
			for _, kind := range []string{"sendfile", "splice-src", "splice-dst"} {
				t.Run(fmt.Sprintf("mode=%v/%s/%s", mode, kind, how), func(t *testing.T) {
					done, expired := watchdog(t, time.Minute)
					defer done()
					g := newGroup(t, cfgOf(t, "mode="+mode))
					l := listen(t, g, "tcp")
					peer, c := pipe(t, g, l)
					parkDir := "write"
					var op func() (int64, error)
					switch kind {
					case "sendfile":
						f, err := os.Open(path)
						if err != nil {
							t.Fatal(err)
						}
						defer f.Close()
						op = func() (int64, error) { return c.(io.ReaderFrom).ReadFrom(f) }
					case "splice-src": // c is the empty source
						parkDir = "read"
						_, sink := pipe(t, g, l)
						op = func() (int64, error) { return c.(io.WriterTo).WriteTo(sink) }
					case "splice-dst": // c's peer does not read
						src, feeder := pipe(t, g, l)
						go func() { feeder.Write(randomBytes(64*mib, 6)) }()
						op = func() (int64, error) { return c.(io.ReaderFrom).ReadFrom(src) }
					}
					res := parkedOp(t, c, parkDir, expired, op)
					want := net.ErrClosed
					if how == "close" {
						c.Close()
					} else {
						want = os.ErrDeadlineExceeded
						if parkDir == "read" {
							c.SetReadDeadline(time.Unix(1, 0))
						} else {
							c.SetWriteDeadline(time.Unix(1, 0))
						}
					}
					select {
					case err := <-res:
						if !errors.Is(err, want) {
							t.Fatalf("%s released by %s: %v, want an error wrapping %v", kind, how, err, want)
						}
						var op *net.OpError
						if !errors.As(err, &op) || (op.Op != "readfrom" && op.Op != "writeto") {
							t.Errorf("error %v is not a readfrom/writeto *net.OpError", err)
						}
					case <-expired:
						t.Fatalf("%s parked for good after %s", kind, how)
					}
					_ = peer
				})
			}
		}
	}
}

// TestReadFromFallback: readers sendfile and splice cannot take are copied,
// and a LimitedReader around a file moves exactly its limit and advances
// the file's offset and N as net does.
func TestReadFromFallback(t *testing.T) {
	g := newGroup(t, netpoll.Config{})
	l := listen(t, g, "tcp")
	client, server := pipe(t, g, l)
	data := randomBytes(3*mib, 9)
	path := writeFile(t, "f.bin", data)

	recv := func(n int) []byte {
		b := make([]byte, n)
		if _, err := io.ReadFull(client, b); err != nil {
			t.Fatalf("receiving %d bytes: %v", n, err)
		}
		return b
	}
	// A plain reader: copied.
	if n, err := server.(io.ReaderFrom).ReadFrom(bytes.NewReader(data[:100*kib])); n != 100*kib || err != nil {
		t.Fatalf("ReadFrom(bytes.Reader) = %d, %v", n, err)
	}
	if !bytesEqual(recv(100*kib), data[:100*kib]) {
		t.Fatal("bytes.Reader: wrong bytes")
	}
	// A pipe: sendfile refuses it (EINVAL), copied.
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	go func() { pw.Write(data[:200*kib]); pw.Close() }()
	if n, err := server.(io.ReaderFrom).ReadFrom(pr); n != 200*kib || err != nil {
		t.Fatalf("ReadFrom(pipe) = %d, %v", n, err)
	}
	pr.Close()
	if !bytesEqual(recv(200*kib), data[:200*kib]) {
		t.Fatal("pipe: wrong bytes")
	}
	if st := netpoll.Counters(g).Total; st.SendfileBytes != 0 || st.SpliceBytes != 0 {
		t.Fatalf("copies counted as zero copy: %+v", st)
	}
	// A LimitedReader around a file, from offset 1 MiB.
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Seek(1*mib, io.SeekStart); err != nil {
		t.Fatal(err)
	}
	lr := &io.LimitedReader{R: f, N: 1*mib + 5}
	if n, err := server.(io.ReaderFrom).ReadFrom(lr); n != 1*mib+5 || err != nil {
		t.Fatalf("ReadFrom(LimitedReader{file}) = %d, %v", n, err)
	}
	if !bytesEqual(recv(1*mib+5), data[1*mib:2*mib+5]) {
		t.Fatal("LimitedReader{file}: wrong bytes")
	}
	if off, _ := f.Seek(0, io.SeekCurrent); off != 2*mib+5 || lr.N != 0 {
		t.Fatalf("after it: file offset %d, N %d; want %d, 0", off, lr.N, 2*mib+5)
	}
	// The rest of the file, no limit: to its end.
	if n, err := server.(io.ReaderFrom).ReadFrom(f); n != mib-5 || err != nil {
		t.Fatalf("ReadFrom(file) = %d, %v", n, err)
	}
	if !bytesEqual(recv(mib-5), data[2*mib+5:]) {
		t.Fatal("file: wrong bytes")
	}
	if st := netpoll.Counters(g).Total; st.SendfileBytes != 2*mib {
		t.Fatalf("Stats: %d bytes by sendfile, want %d", st.SendfileBytes, 2*mib)
	}
}

// TestSpliceAfterShortRead: a splice leaves the source's read direction
// not drained. A Read that came up short, then a splice that parked (and so
// consumed the edge of the data it then took, and of what stays queued),
// then a Read: that Read must make its syscall, not wait for an edge that
// will not come.
func TestSpliceAfterShortRead(t *testing.T) {
	for _, mode := range modes {
		t.Run("mode="+mode, func(t *testing.T) {
			done, expired := watchdog(t, 30*time.Second)
			defer done()
			g := newGroup(t, cfgOf(t, "mode="+mode+",shortread=on"))
			l := listen(t, g, "tcp")
			client, server := pipe(t, g, l)
			_, sink := pipe(t, g, l)
			client.Write([]byte("short"))
			buf := make([]byte, 100)
			if n, err := server.Read(buf); n != 5 || err != nil {
				t.Fatalf("Read = %d, %v", n, err)
			}
			const limit = 100 // one segment with the tail: one edge, consumed by the parked splice
			res := parkedOp(t, server, "read", expired, func() (int64, error) {
				return sink.(io.ReaderFrom).ReadFrom(&io.LimitedReader{R: server, N: limit})
			})
			tail := []byte("the tail")
			client.Write(append(randomBytes(limit, 1), tail...))
			if err := <-res; err != nil {
				t.Fatalf("splice: %v", err)
			}
			got := make(chan string, 1)
			go func() {
				n, _ := io.ReadFull(server, buf[:len(tail)])
				got <- string(buf[:n])
			}()
			select {
			case s := <-got:
				if s != string(tail) {
					t.Fatalf("Read after the splice: %q, want %q", s, tail)
				}
			case <-expired:
				t.Fatal("Read after the splice waited for an edge with data queued")
			}
		})
	}
}

// TestConnFile: File is a dup that outlives neither side's Close, reaches
// the same socket, and turns short-read skipping off.
func TestConnFile(t *testing.T) {
	g := newGroup(t, cfgOf(t, "shortread=on"))
	l := listen(t, g, "tcp")
	client, server := pipe(t, g, l)
	fds := countFDs(t)
	f, err := server.(*netpoll.Conn).File()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(f.Name(), "tcp:127.0.0.1:") || !strings.Contains(f.Name(), "->127.0.0.1:") {
		t.Errorf("File name %q", f.Name())
	}
	// Not f.Fd(): it would put the socket, shared with the conn, in
	// blocking mode, as with package net's File.
	frc, err := f.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var setErr error
	frc.Control(func(fd uintptr) {
		if int(fd) == netpoll.FD(server) {
			setErr = errors.New("File returned the connection's own fd")
			return
		}
		// The same socket: an option set through the file reads back on the conn.
		setErr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVLOWAT, 3)
	})
	if setErr != nil {
		t.Fatal(setErr)
	}
	rc, _ := server.(*netpoll.Conn).SyscallConn()
	lowat := 0
	rc.Control(func(fd uintptr) { lowat, _ = unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVLOWAT) })
	if lowat != 3 {
		t.Errorf("SO_RCVLOWAT through the conn %d, want 3 (set through the file)", lowat)
	}
	if netpoll.Sticky(server) == 0 {
		t.Error("File left short-read skipping on")
	}
	f.Close()
	client.Write([]byte("abc"))
	b := make([]byte, 3)
	if _, err := io.ReadFull(server, b); err != nil || string(b) != "abc" {
		t.Fatalf("conn after closing its File: %q, %v", b, err)
	}
	if n := countFDs(t); n != fds {
		t.Errorf("%d fds after closing the File, want %d", n, fds)
	}
	server.Close()
	if _, err := server.(*netpoll.Conn).File(); !errors.Is(err, net.ErrClosed) {
		t.Errorf("File after Close: %v, want net.ErrClosed", err)
	}
}
