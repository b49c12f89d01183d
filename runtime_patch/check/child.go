package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"syscall"
)

func child(args []string, stdout io.Writer) error {
	if len(args) == 0 {
		return errors.New("child: no workload")
	}
	fs := flag.NewFlagSet("child", flag.ContinueOnError)
	rounds := fs.Int("n", 2000, "ping-pong round trips")
	pairs := fs.Int("pairs", 1, "concurrent ping-pong connections")
	peer := fs.String("peer", "", "ping-pong against this echo address instead of an in-process peer")
	fill := fs.Int("fill", 0, "open this many fds (of /dev/null) before the ping-pongs")
	sleeps := fs.Int("sleeps", idleSleeps, "idle: sleeps in the idle window after the ping-pong")
	safeCase := fs.String("case", "", "shortsafe: the case to run")
	want := fs.Bool("on", false, "zeroread: expect GODEBUG=netpollzeroread=1 in effect")
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	switch args[0] {
	case "pingpong":
		for range *fill {
			f, err := os.Open(os.DevNull)
			if err != nil {
				return err
			}
			defer f.Close()
		}
		errc := make(chan error, *pairs)
		for range *pairs {
			go func() { errc <- pingpong(*rounds, *peer) }()
		}
		for range *pairs {
			if err := <-errc; err != nil {
				return err
			}
		}
		return nil
	case "accept":
		ctxsw, err := acceptStream(*rounds)
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "accepts=%d ctxsw=%d\n", *rounds, ctxsw)
		return nil
	case "echo":
		return echoOne(stdout)
	case "idle":
		return idleAfterPingPong(*rounds, *sleeps, *peer)
	case "shortread":
		line, err := shortReadPingPong(*rounds)
		if err != nil {
			return err
		}
		fmt.Fprintln(stdout, line)
		return nil
	case "zeroread":
		return zeroReadChild(*want, stdout)
	case "httpidle":
		return httpIdleChild(*rounds, stdout)
	case "shardlast":
		line, err := shardLastChild()
		if err != nil {
			return err
		}
		fmt.Fprintln(stdout, line)
		return nil
	case "shortload":
		line, err := shortLoadChild(*rounds)
		if err != nil {
			return err
		}
		fmt.Fprintln(stdout, line)
		return nil
	case "shortsafe":
		line, err := shortSafeChild(*safeCase)
		if err != nil {
			return err
		}
		fmt.Fprintln(stdout, line)
		return nil
	case "epollfds":
		line, err := epollFDs()
		if err != nil {
			return err
		}
		fmt.Fprintln(stdout, line)
		return nil
	}
	return fmt.Errorf("child: unknown workload %q", args[0])
}

// pingpong sends one byte back and forth rounds times over loopback TCP,
// so both sides park on every round. The other side is an echo goroutine
// in this process, or the echo server at peer if peer is not empty.
func pingpong(rounds int, peer string) error {
	if peer != "" {
		c, err := net.Dial("tcp", peer)
		if err != nil {
			return err
		}
		defer c.Close()
		return ping(c, rounds)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	defer ln.Close()
	errc := make(chan error, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			errc <- err
			return
		}
		defer c.Close()
		buf := make([]byte, 1)
		for range rounds {
			if _, err := io.ReadFull(c, buf); err != nil {
				errc <- err
				return
			}
			if _, err := c.Write(buf); err != nil {
				errc <- err
				return
			}
		}
		errc <- nil
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		return err
	}
	defer c.Close()
	if err := ping(c, rounds); err != nil {
		return err
	}
	return <-errc
}

// ping writes one byte to c and reads it back, rounds times.
func ping(c net.Conn, rounds int) error {
	buf := []byte{'x'}
	for range rounds {
		if _, err := c.Write(buf); err != nil {
			return err
		}
		if _, err := io.ReadFull(c, buf); err != nil {
			return err
		}
	}
	return nil
}

// echoOne accepts one connection on a loopback listener whose address it
// has printed to stdout, echoes what it sends until it ends, and returns.
func echoOne(stdout io.Writer) error {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	defer ln.Close()
	if _, err := fmt.Fprintln(stdout, ln.Addr()); err != nil {
		return err
	}
	c, err := ln.Accept()
	if err != nil {
		return err
	}
	defer c.Close()
	_, err = io.Copy(c, c)
	return err
}

// acceptStream dials n connections over loopback TCP one after another
// while a goroutine accepts and closes them, and returns the process's
// context switches over the stream.
func acceptStream(n int) (int64, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	errc := make(chan error, 1)
	go func() {
		for range n {
			c, err := ln.Accept()
			if err != nil {
				errc <- err
				return
			}
			c.Close()
		}
		errc <- nil
	}()
	before := contextSwitches()
	for range n {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			return 0, err
		}
		c.Close()
	}
	if err := <-errc; err != nil {
		return 0, err
	}
	return contextSwitches() - before, nil
}

func contextSwitches() int64 {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return ru.Nvcsw + ru.Nivcsw
}
