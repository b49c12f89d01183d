package dropin_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	testpb "google.golang.org/grpc/interop/grpc_testing"
)

// grpcEcho serves grpc's interop TestService: unary and bidirectional
// calls echo the payload, server streaming sends the sizes asked for, and
// client streaming adds up what it received.
type grpcEcho struct {
	testpb.UnimplementedTestServiceServer
}

func (grpcEcho) UnaryCall(_ context.Context, req *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
	return &testpb.SimpleResponse{Payload: req.GetPayload()}, nil
}

func (grpcEcho) FullDuplexCall(stream grpc.BidiStreamingServer[testpb.StreamingOutputCallRequest, testpb.StreamingOutputCallResponse]) error {
	for {
		req, err := stream.Recv()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		if err := stream.Send(&testpb.StreamingOutputCallResponse{Payload: req.GetPayload()}); err != nil {
			return err
		}
	}
}

func (grpcEcho) StreamingOutputCall(req *testpb.StreamingOutputCallRequest, stream grpc.ServerStreamingServer[testpb.StreamingOutputCallResponse]) error {
	for i, p := range req.GetResponseParameters() {
		body := grpcBody(i, int(p.GetSize()))
		if err := stream.Send(&testpb.StreamingOutputCallResponse{Payload: &testpb.Payload{Body: body}}); err != nil {
			return err
		}
	}
	return nil
}

func (grpcEcho) StreamingInputCall(stream grpc.ClientStreamingServer[testpb.StreamingInputCallRequest, testpb.StreamingInputCallResponse]) error {
	total := 0
	for {
		req, err := stream.Recv()
		if err == io.EOF {
			return stream.SendAndClose(&testpb.StreamingInputCallResponse{AggregatedPayloadSize: int32(total)})
		}
		if err != nil {
			return err
		}
		total += len(req.GetPayload().GetBody())
	}
}

// grpcBody is the i-th body of n bytes, the same on both sides.
func grpcBody(i, n int) []byte {
	return randomBytes(n, uint64(i)+100)
}

// TestGRPC serves grpc's interop TestService on our listener and calls it
// with a gRPC client whose connections come from our Dial (in a second
// group, so both ends are ours), in every mode: concurrent unary calls
// with payloads from 0 to 256 KiB, bidirectional echo streams, a server
// stream and a client stream, every payload checked; then a graceful stop.
func TestGRPC(t *testing.T) {
	const (
		unary      = 200
		callers    = 8
		streams    = 2
		streamMsgs = 100
	)
	sizes := []int{0, 1, 100, 4 << 10, 16<<10 + 1, 64 << 10, 256 << 10}
	for _, mode := range modes {
		t.Run("mode="+mode, func(t *testing.T) {
			sg := newGroup(t, cfgOf(t, "mode="+mode))
			cg := newGroup(t, cfgOf(t, "mode="+mode+",pollers=2"))
			l := listen(t, sg, "tcp")
			srv := grpc.NewServer()
			testpb.RegisterTestServiceServer(srv, grpcEcho{})
			served := make(chan error, 1)
			go func() { served <- srv.Serve(l) }()
			stopped := false
			defer func() {
				if !stopped {
					srv.Stop()
				}
			}()

			var dials atomic.Int64
			cc, err := grpc.NewClient("passthrough:///"+l.Addr().String(),
				grpc.WithTransportCredentials(insecure.NewCredentials()),
				grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
					dials.Add(1)
					return cg.Dial(ctx, "tcp", addr)
				}))
			if err != nil {
				t.Fatal(err)
			}
			defer cc.Close()
			client := testpb.NewTestServiceClient(cc)
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()

			var wg sync.WaitGroup
			errc := make(chan error, callers+streams+2)
			for w := range callers {
				wg.Go(func() {
					for i := w; i < unary; i += callers {
						body := grpcBody(i, sizes[i%len(sizes)])
						resp, err := client.UnaryCall(ctx, &testpb.SimpleRequest{Payload: &testpb.Payload{Body: body}})
						if err != nil {
							errc <- fmt.Errorf("unary call %d: %w", i, err)
							return
						}
						if !bytes.Equal(resp.GetPayload().GetBody(), body) {
							errc <- fmt.Errorf("unary call %d: %d bytes came back for %d sent, or different ones", i, len(resp.GetPayload().GetBody()), len(body))
							return
						}
					}
				})
			}
			for s := range streams {
				wg.Go(func() {
					errc <- grpcBidi(ctx, client, s, streamMsgs, sizes)
				})
			}
			wg.Go(func() {
				req := &testpb.StreamingOutputCallRequest{}
				for _, n := range sizes {
					req.ResponseParameters = append(req.ResponseParameters, &testpb.ResponseParameters{Size: int32(n)})
				}
				stream, err := client.StreamingOutputCall(ctx, req)
				if err != nil {
					errc <- fmt.Errorf("server stream: %w", err)
					return
				}
				for i, n := range sizes {
					resp, err := stream.Recv()
					if err != nil {
						errc <- fmt.Errorf("server stream, message %d: %w", i, err)
						return
					}
					if !bytes.Equal(resp.GetPayload().GetBody(), grpcBody(i, n)) {
						errc <- fmt.Errorf("server stream, message %d: wrong body of %d bytes", i, len(resp.GetPayload().GetBody()))
						return
					}
				}
				if _, err := stream.Recv(); err != io.EOF {
					errc <- fmt.Errorf("server stream after the last message: %v, want io.EOF", err)
				}
			})
			wg.Go(func() {
				stream, err := client.StreamingInputCall(ctx)
				if err != nil {
					errc <- fmt.Errorf("client stream: %w", err)
					return
				}
				total := 0
				for i, n := range sizes {
					if err := stream.Send(&testpb.StreamingInputCallRequest{Payload: &testpb.Payload{Body: grpcBody(i, n)}}); err != nil {
						errc <- fmt.Errorf("client stream, message %d: %w", i, err)
						return
					}
					total += n
				}
				resp, err := stream.CloseAndRecv()
				if err != nil || int(resp.GetAggregatedPayloadSize()) != total {
					errc <- fmt.Errorf("client stream: server counted %d bytes, %v; want %d", resp.GetAggregatedPayloadSize(), err, total)
				}
			})
			wg.Wait()
			close(errc)
			for err := range errc {
				if err != nil {
					t.Error(err)
				}
			}

			if err := cc.Close(); err != nil {
				t.Errorf("ClientConn.Close: %v", err)
			}
			srv.GracefulStop()
			stopped = true
			if err := <-served; err != nil {
				t.Errorf("Serve: %v", err)
			}
			if n := dials.Load(); n < 1 {
				t.Errorf("the client never dialed through our Dial")
			}
			st := sg.Stats()
			if st.Accepts < uint64(dials.Load()) {
				t.Errorf("server group accepted %d connections for %d dials", st.Accepts, dials.Load())
			}
			t.Logf("%d unary calls, %d streams × %d echoes, a server and a client stream over %d connection(s); server parks %d",
				unary, streams, streamMsgs, dials.Load(), st.Parks)
		})
	}
}

// grpcBidi sends msgs payloads on one bidirectional stream, reading each
// echo as it comes, and checks them.
func grpcBidi(ctx context.Context, client testpb.TestServiceClient, s, msgs int, sizes []int) error {
	stream, err := client.FullDuplexCall(ctx)
	if err != nil {
		return fmt.Errorf("stream %d: %w", s, err)
	}
	recvErr := make(chan error, 1)
	go func() {
		for i := range msgs {
			resp, err := stream.Recv()
			if err != nil {
				recvErr <- fmt.Errorf("stream %d, echo %d: %w", s, i, err)
				return
			}
			if want := grpcBody(s*msgs+i, sizes[i%len(sizes)]); !bytes.Equal(resp.GetPayload().GetBody(), want) {
				recvErr <- fmt.Errorf("stream %d, echo %d: wrong body", s, i)
				return
			}
		}
		if _, err := stream.Recv(); err != io.EOF {
			recvErr <- fmt.Errorf("stream %d after the last echo: %v, want io.EOF", s, err)
			return
		}
		recvErr <- nil
	}()
	for i := range msgs {
		body := grpcBody(s*msgs+i, sizes[i%len(sizes)])
		if err := stream.Send(&testpb.StreamingOutputCallRequest{Payload: &testpb.Payload{Body: body}}); err != nil {
			return fmt.Errorf("stream %d, message %d: %w", s, i, err)
		}
	}
	if err := stream.CloseSend(); err != nil {
		return fmt.Errorf("stream %d: CloseSend: %w", s, err)
	}
	return <-recvErr
}
