// Package bench holds the go test -bench comparisons of package net and
// netpoll. Benchmark names are key=value paths (impl=netpoll/mode=et/...)
// so that benchstat -col /impl,/mode compares them directly.
//
//	go test -run '^$' -bench . -count 6 ./bench/ | tee new.txt
//	go tool benchstat -col /impl,/mode,/wait new.txt
package bench
