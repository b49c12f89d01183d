module github.com/edgepoll/edgepoll/bench/peers

go 1.26.0

require (
	github.com/bytedance/gopkg v0.1.1
	github.com/cloudwego/netpoll v0.7.2
	github.com/lesismal/nbio v1.5.12
	github.com/panjf2000/gnet/v2 v2.5.7
	golang.org/x/sys v0.21.0
)

require (
	github.com/cloudwego/gopkg v0.1.4 // indirect
	github.com/valyala/bytebufferpool v1.0.0 // indirect
	go.uber.org/atomic v1.7.0 // indirect
	go.uber.org/multierr v1.6.0 // indirect
	go.uber.org/zap v1.21.0 // indirect
	golang.org/x/sync v0.8.0 // indirect
	gopkg.in/natefinch/lumberjack.v2 v2.2.1 // indirect
)
